package rocketlake.bench;

import java.io.BufferedReader;
import java.io.FileWriter;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * The mirror bench's producer (bench/mirror_bench.py): RocketMQ's DefaultMQProducer in a JVM of its
 * own, sending at a steady rate from {@code threads} threads (synchronous sends, so up to that many
 * requests in flight), {@code batch} messages per request (the client's batch send: one topic per
 * request; the broker stores every message of it as a record of its own).
 *
 * <pre>BenchProducer NAMESRV FILE RATE FIRST TOPICS THREADS BATCH</pre>
 *
 * Message i has key {@code key-i}, tag {@code tag(i % 3)} and a body of 20 to 120 bytes; a request
 * of messages i..i+batch-1 goes to topic {@code topics[(i / batch) % n]} and is due at
 * {@code (i - FIRST) / RATE} s after the start (a thread that falls behind sends back to back). Every
 * message of a SEND_OK request is one line appended to FILE (i, topic, queue id, queue offset,
 * offsetMsgId, msgId, key, tag). Prints {@code ready}; on a line {@code stop} (or the end of stdin)
 * it stops and prints {@code produced SENT FAILED NEXT} (NEXT: the first message number not used).
 */
public final class BenchProducer {
    private final DefaultMQProducer producer;
    private final PrintWriter out;
    private final double rate;
    private final long first;
    private final String[] topics;
    private final int batch;
    private final AtomicLong next;
    private final AtomicLong sent = new AtomicLong();
    private final AtomicLong failed = new AtomicLong();
    private volatile boolean stop;
    private long t0;

    private BenchProducer(String nsAddr, String file, double rate, long first, String[] topics, int batch)
            throws Exception {
        this.rate = rate;
        this.first = first;
        this.topics = topics;
        this.batch = batch;
        this.next = new AtomicLong(first);
        this.out = new PrintWriter(new FileWriter(file, StandardCharsets.UTF_8, true));
        producer = new DefaultMQProducer("rocketlake_bench_producer");
        producer.setNamesrvAddr(nsAddr);
        producer.setInstanceName("rocketlake-bench-producer-" + ProcessHandle.current().pid());
        producer.setVipChannelEnabled(false);
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
    }

    private Message message(long i, String topic) {
        StringBuilder body = new StringBuilder("message ").append(i).append(' ');
        for (int k = 0; k < 10 + i % 100; k++) {
            body.append((char) ('a' + k % 26));
        }
        return new Message(topic, "tag" + (i % 3), "key-" + i, body.toString().getBytes(StandardCharsets.UTF_8));
    }

    private void run() {
        while (!stop) {
            long i0 = next.getAndAdd(batch);
            long wait = t0 + (long) ((i0 - first) * 1e9 / rate) - System.nanoTime();
            try {
                if (wait > 0) {
                    Thread.sleep(wait / 1000000, (int) (wait % 1000000));
                }
            } catch (InterruptedException e) {
                return;
            }
            String topic = topics[(int) ((i0 / batch) % topics.length)];
            List<Message> msgs = new ArrayList<>(batch);
            for (long i = i0; i < i0 + batch; i++) {
                msgs.add(message(i, topic));
            }
            try {
                SendResult r = batch == 1 ? producer.send(msgs.get(0), 3000) : producer.send(msgs, 3000);
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    failed.addAndGet(batch);
                    continue;
                }
                // a batch's result: its first queue offset, the messages' ids joined by commas
                String[] offsetIds = r.getOffsetMsgId().split(",");
                String[] ids = r.getMsgId().split(",");
                StringBuilder lines = new StringBuilder();
                for (int k = 0; k < batch; k++) {
                    Message m = msgs.get(k);
                    lines.append(i0 + k).append('\t').append(topic).append('\t').append(r.getMessageQueue().getQueueId())
                        .append('\t').append(r.getQueueOffset() + k).append('\t').append(offsetIds[k]).append('\t')
                        .append(ids[k]).append('\t').append(m.getKeys()).append('\t').append(m.getTags()).append('\n');
                }
                synchronized (out) {
                    out.print(lines);
                    out.flush();
                }
                sent.addAndGet(batch);
            } catch (Exception e) {
                failed.addAndGet(batch);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        BenchProducer p = new BenchProducer(args[0], args[1], Double.parseDouble(args[2]), Long.parseLong(args[3]),
            args[4].split(","), Integer.parseInt(args[6]));
        int threads = Integer.parseInt(args[5]);
        System.out.println("ready");
        System.out.flush();
        p.t0 = System.nanoTime();
        List<Thread> ts = new ArrayList<>();
        for (int k = 0; k < threads; k++) {
            Thread t = new Thread(p::run, "bench-producer-" + k);
            t.setDaemon(true);
            t.start();
            ts.add(t);
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null && !line.equals("stop")) {
            // only "stop" is understood
        }
        p.stop = true;
        for (Thread t : ts) {
            t.join(10000);
        }
        p.producer.shutdown();
        p.out.close();
        System.out.println("produced\t" + p.sent.get() + "\t" + p.failed.get() + "\t" + p.next.get());
        System.out.flush();
        System.exit(0);
    }
}
