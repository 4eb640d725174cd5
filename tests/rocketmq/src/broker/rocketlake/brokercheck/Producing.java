package rocketlake.brokercheck;

import java.io.FileWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;

/**
 * A real producer (DefaultMQProducer) at a steady rate, on a thread of the broker's JVM: message i
 * goes to topic {@code topics[i % n]} with key {@code key-i}, tag {@code tag(i % 3)} and a body of
 * 20 to 120 bytes. Every SEND_OK is appended to a file as one tab-separated line (i, topic, queue
 * id, queue offset, offsetMsgId, msgId, key, tag) and flushed, so the lines survive a SIGKILL of
 * the JVM: each names a message the broker acknowledged.
 */
final class Producing implements Runnable {
    private final DefaultMQProducer producer;
    private final String file;
    private final double rate;
    private final long first;
    private final String[] topics;
    private volatile boolean stop;
    private long sent;
    private long failed;
    private Thread thread;

    Producing(String nsAddr, String file, double rate, long first, String[] topics) throws Exception {
        this.file = file;
        this.rate = rate;
        this.first = first;
        this.topics = topics;
        producer = new DefaultMQProducer("rocketlake_mirror_producer");
        producer.setNamesrvAddr(nsAddr);
        producer.setInstanceName("rocketlake-producer-" + ProcessHandle.current().pid());
        producer.setVipChannelEnabled(false);
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
    }

    static void createTopics(BrokerController broker, String[] topics, int queues) {
        for (String t : topics) {
            broker.getTopicConfigManager().updateTopicConfig(new TopicConfig(t, queues, queues));
        }
        broker.registerBrokerAll(true, false, true);
    }

    void begin() {
        thread = new Thread(this, "rocketlake-producer");
        thread.setDaemon(true);
        thread.start();
    }

    /** Stops the thread; "SENT FAILED NEXT". */
    String end() throws InterruptedException {
        stop = true;
        thread.join();
        producer.shutdown();
        return sent + "\t" + failed + "\t" + (first + sent + failed);
    }

    @Override
    public void run() {
        long t0 = System.nanoTime();
        try (PrintWriter w = new PrintWriter(new FileWriter(file, StandardCharsets.UTF_8, true))) {
            for (long i = first; !stop; i++) {
                long due = t0 + (long) ((i - first) * 1e9 / rate);
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1000000, (int) (wait % 1000000));
                }
                String topic = topics[(int) (i % topics.length)];
                String tag = "tag" + (i % 3);
                String key = "key-" + i;
                StringBuilder body = new StringBuilder("message ").append(i).append(' ');
                for (int k = 0; k < 10 + i % 100; k++) {
                    body.append((char) ('a' + k % 26));
                }
                try {
                    SendResult r = producer.send(new Message(topic, tag, key,
                        body.toString().getBytes(StandardCharsets.UTF_8)), 3000);
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        w.println(i + "\t" + topic + "\t" + r.getMessageQueue().getQueueId() + "\t" + r.getQueueOffset()
                            + "\t" + r.getOffsetMsgId() + "\t" + r.getMsgId() + "\t" + key + "\t" + tag);
                        w.flush();
                        sent++;
                    } else {
                        failed++;
                    }
                } catch (Exception e) {
                    failed++;
                }
            }
        } catch (Exception e) {
            e.printStackTrace();
        }
    }
}
