package rocketlake.refwriter;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.reflect.Method;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.rocketmq.common.SystemClock;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.PutMessageStatus;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * rocketlake's reference writer: RocketMQ's own DefaultMessageStore writes a store from a list of
 * messages, one putMessage at a time, with a store clock set to each message's store_timestamp.
 *
 * <p>Jobs come on stdin, one per line, tab-separated: {@code id store messages.tsv config.properties
 * results.tsv [queries.tsv answers.jsonl]} (with queries: {@link Answers} answers them on the
 * store, opened again after the write run; an empty messages.tsv path: only answer them). Up to {@code --threads} jobs run at once (a store's clean shutdown waits seconds).
 * For each finished job one line goes to stdout: {@code done <id> ok} or {@code done <id> error <text>}.
 *
 * <p>messages.tsv, one message per line, tab-separated: topic (base64 UTF-8), queue_id, flag,
 * sys_flag, born_timestamp, store_timestamp, born_host, store_host ({@code ip:port} or
 * {@code [ipv6]:port}), reconsume_times, prepared_transaction_offset, body (base64),
 * properties_string (base64 UTF-8), and optionally a batch id and the batch's own properties string
 * (base64 UTF-8): consecutive messages with the same non-empty batch id go to the store in one
 * {@code putMessages} (a MessageExtBatch: topic, queue, sys flag, born time and hosts of the first;
 * flag, body and properties of each), as the broker's batch send does.
 *
 * <p>config.properties: MessageStoreConfig setters by name (mappedFileSizeCommitLog=65536, ...);
 * storePathRootDir and storePathCommitLog are set from the job's store directory. Keys that are the
 * harness's, not the store's: {@code batchCQTopics} (comma-separated topics whose TopicConfig has
 * {@code queue.type=BatchCQ}) and {@code haltAfterWrite=true} (the JVM halts after the puts, without
 * the store's shutdown: the store of a broker that died, abort file and all).
 *
 * <p>results.tsv, one line per message: status, wrote_offset, wrote_bytes, msg_id, queue_offset,
 * store_timestamp.
 */
public final class RefWriter {
    private RefWriter() {
    }

    /** The store's clock: whatever the writer sets before each put. */
    static final class Clock extends SystemClock {
        volatile long now;

        @Override
        public long now() {
            return now;
        }
    }

    public static void main(String[] args) throws Exception {
        int threads = 4;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--threads")) {
                threads = Integer.parseInt(args[++i]);
            }
        }
        // A thread per job, at most `threads` at once: a store's thread-local buffers (the put
        // encoders' maxMessageSize arrays) go with the thread that used it, not with a pooled
        // thread that outlives the store and keeps them.
        java.util.concurrent.Semaphore slots = new java.util.concurrent.Semaphore(threads);
        PrintWriter out = new PrintWriter(new java.io.OutputStreamWriter(System.out, StandardCharsets.UTF_8), true);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        List<Thread> running = new ArrayList<>();
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            slots.acquire();
            Thread job = new Thread(() -> {
                String status;
                try {
                    if (!f[2].isEmpty()) {
                        write(f[0], f[1], f[2], f[3], f[4]);
                    }
                    if (f.length > 6 && !f[5].isEmpty()) {
                        Answers.answer(config(f[1], f[3]), batchCQTopics(f[3]), f[1], f[5], f[6]);
                    }
                    status = "ok";
                } catch (Throwable t) {
                    StringWriter sw = new StringWriter();
                    t.printStackTrace(new PrintWriter(sw));
                    status = "error " + sw.toString().replace('\n', ' ').replace('\t', ' ');
                }
                synchronized (out) {
                    out.println("done " + f[0] + " " + status);
                }
                slots.release();
            });
            job.start();
            running.add(job);
        }
        for (Thread job : running) {
            job.join();
        }
        out.flush();
        System.exit(0);
    }

    /** The harness's keys of a config file (see the class comment), not MessageStoreConfig's. */
    static final java.util.Set<String> HARNESS_KEYS = new java.util.HashSet<>(
        java.util.Arrays.asList("batchCQTopics", "haltAfterWrite"));

    static Properties props(String configPath) throws Exception {
        Properties props = new Properties();
        try (FileInputStream fin = new FileInputStream(configPath)) {
            props.load(new InputStreamReader(fin, StandardCharsets.UTF_8));
        }
        return props;
    }

    static java.util.List<String> batchCQTopics(String configPath) throws Exception {
        String v = props(configPath).getProperty("batchCQTopics", "").trim();
        return v.isEmpty() ? new ArrayList<>() : java.util.Arrays.asList(v.split(","));
    }

    static MessageStoreConfig config(String storeDir, String configPath) throws Exception {
        MessageStoreConfig cfg = new MessageStoreConfig();
        Properties props = props(configPath);
        for (String key : props.stringPropertyNames()) {
            if (!HARNESS_KEYS.contains(key)) {
                setConfig(cfg, key, props.getProperty(key).trim());
            }
        }
        cfg.setStorePathRootDir(storeDir);
        cfg.setStorePathCommitLog(storeDir + File.separator + "commitlog");
        return cfg;
    }

    static void write(String id, String storeDir, String messagesPath, String configPath, String resultsPath) throws Exception {
        MessageStoreConfig cfg = config(storeDir, configPath);
        Clock clock = new Clock();
        DefaultMessageStore store = Compat.newStore(cfg, clock, null, batchCQTopics(configPath));
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed for " + storeDir);
        }
        store.start();
        boolean halt = Boolean.parseBoolean(props(configPath).getProperty("haltAfterWrite", "false").trim());
        File indexDir = new File(storeDir, "index");
        StringBuilder results = new StringBuilder();
        List<String[]> lines = new ArrayList<>();
        try (BufferedReader r = Files.newBufferedReader(new File(messagesPath).toPath(), StandardCharsets.UTF_8)) {
            String line;
            while ((line = r.readLine()) != null) {
                if (!line.isEmpty()) {
                    lines.add(line.split("\t", -1));
                }
            }
        }
        try {
            int n = 0;
            while (n < lines.size()) {
                String batch = batchId(lines.get(n));
                int end = n + 1;
                while (!batch.isEmpty() && end < lines.size() && batch.equals(batchId(lines.get(end)))) {
                    end++;
                }
                int indexFiles = count(indexDir);
                if (batch.isEmpty()) {
                    MessageExt msg = message(lines.get(n));
                    clock.now = msg.getStoreTimestamp();
                    PutMessageResult res = Compat.put(store, msg);
                    check(res, n);
                    results.append(res.getPutMessageStatus()).append('\t')
                        .append(res.getAppendMessageResult().getWroteOffset()).append('\t')
                        .append(res.getAppendMessageResult().getWroteBytes()).append('\t')
                        .append(res.getAppendMessageResult().getMsgId()).append('\t')
                        .append(res.getAppendMessageResult().getLogicsOffset()).append('\t')
                        .append(msg.getStoreTimestamp()).append('\n');
                } else {
                    MessageExtBatch b = batch(lines.subList(n, end));
                    clock.now = Long.parseLong(lines.get(n)[5]);
                    PutMessageResult res = store.putMessages(b);
                    check(res, n);
                    // one line per inner message: its record's offset from its msgId, its size up
                    // to the next record (the last: to the batch's end)
                    String[] ids = res.getAppendMessageResult().getMsgId().split(",");
                    long batchEnd = res.getAppendMessageResult().getWroteOffset() + res.getAppendMessageResult().getWroteBytes();
                    for (int i = 0; i < ids.length; i++) {
                        long off = MessageDecoder.decodeMessageId(ids[i]).getOffset();
                        long next = i + 1 < ids.length ? MessageDecoder.decodeMessageId(ids[i + 1]).getOffset() : batchEnd;
                        results.append(res.getPutMessageStatus()).append('\t').append(off).append('\t')
                            .append(next - off).append('\t').append(ids[i]).append('\t')
                            .append(res.getAppendMessageResult().getLogicsOffset() + i).append('\t')
                            .append(clock.now).append('\n');
                    }
                }
                // The consume queues and the index are built by the store's reput thread: wait
                // for it, so that every message is dispatched before the next one is put.
                while (store.dispatchBehindBytes() > 0) {
                    Thread.sleep(0, 200000);
                }
                // Index files are named by the wall clock (ms): a new one gets a later name.
                if (count(indexDir) != indexFiles) {
                    Thread.sleep(3);
                }
                n = end;
            }
            if (halt) {
                // a broker that dies here: the commit log is flushed (SYNC_FLUSH), the consume
                // queues and checkpoint as far as the flush services got; abort stays
                Files.write(new File(resultsPath).toPath(), results.toString().getBytes(StandardCharsets.UTF_8));
                System.out.println("done " + id + " ok");
                System.out.flush();
                Runtime.getRuntime().halt(0);
            }
        } finally {
            store.shutdown();
        }
        Files.write(new File(resultsPath).toPath(), results.toString().getBytes(StandardCharsets.UTF_8));
    }

    static String batchId(String[] f) {
        return f.length > 12 ? f[12] : "";
    }

    static void check(PutMessageResult res, int n) {
        if (res.getPutMessageStatus() != PutMessageStatus.PUT_OK) {
            throw new IllegalStateException("message " + n + ": put answered " + res.getPutMessageStatus());
        }
    }

    /** A batch as the broker's batch send makes it: the inner messages encoded into the body. */
    static MessageExtBatch batch(List<String[]> fs) throws Exception {
        List<Message> inner = new ArrayList<>();
        for (String[] f : fs) {
            Message m = new Message(new String(Base64.getDecoder().decode(f[0]), StandardCharsets.UTF_8),
                Base64.getDecoder().decode(f[10]));
            m.setFlag(Integer.parseInt(f[2]));
            MessageAccessor.setProperties(m, MessageDecoder.string2messageProperties(
                new String(Base64.getDecoder().decode(f[11]), StandardCharsets.UTF_8)));
            inner.add(m);
        }
        String[] f = fs.get(0);
        MessageExtBatch b = new MessageExtBatch();
        b.setTopic(new String(Base64.getDecoder().decode(f[0]), StandardCharsets.UTF_8));
        b.setQueueId(Integer.parseInt(f[1]));
        b.setSysFlag(Integer.parseInt(f[3]));
        b.setBornTimestamp(Long.parseLong(f[4]));
        b.setBornHost(host(f[6]));
        b.setStoreHost(host(f[7]));
        b.setReconsumeTimes(Integer.parseInt(f[8]));
        b.setBody(MessageDecoder.encodeMessages(inner));
        String props = f.length > 13 ? new String(Base64.getDecoder().decode(f[13]), StandardCharsets.UTF_8) : "";
        MessageAccessor.setProperties(b, MessageDecoder.string2messageProperties(props));
        Compat.setBatchPropertiesString(b, props);
        return b;
    }

    static int count(File dir) {
        String[] names = dir.list();
        return names == null ? 0 : names.length;
    }

    static MessageExt message(String[] f) throws Exception {
        MessageExt m = Compat.newMessage();
        m.setTopic(new String(Base64.getDecoder().decode(f[0]), StandardCharsets.UTF_8));
        m.setQueueId(Integer.parseInt(f[1]));
        m.setFlag(Integer.parseInt(f[2]));
        m.setSysFlag(Integer.parseInt(f[3]));
        m.setBornTimestamp(Long.parseLong(f[4]));
        m.setStoreTimestamp(Long.parseLong(f[5]));
        m.setBornHost(host(f[6]));
        m.setStoreHost(host(f[7]));
        m.setReconsumeTimes(Integer.parseInt(f[8]));
        m.setPreparedTransactionOffset(Long.parseLong(f[9]));
        m.setBody(Base64.getDecoder().decode(f[10]));
        String propertiesString = new String(Base64.getDecoder().decode(f[11]), StandardCharsets.UTF_8);
        Map<String, String> properties = MessageDecoder.string2messageProperties(propertiesString);
        MessageAccessor.setProperties(m, properties);
        Compat.setPropertiesString(m, propertiesString);
        return m;
    }

    static InetSocketAddress host(String text) throws Exception {
        int colon = text.lastIndexOf(':');
        String addr = text.substring(0, colon);
        if (addr.startsWith("[")) {
            addr = addr.substring(1, addr.length() - 1);
        }
        return new InetSocketAddress(InetAddress.getByName(addr), Integer.parseInt(text.substring(colon + 1)));
    }

    static void setConfig(MessageStoreConfig cfg, String key, String value) throws Exception {
        String setter = "set" + Character.toUpperCase(key.charAt(0)) + key.substring(1);
        for (Method m : MessageStoreConfig.class.getMethods()) {
            if (!m.getName().equals(setter) || m.getParameterCount() != 1) {
                continue;
            }
            Class<?> t = m.getParameterTypes()[0];
            Object v;
            if (t == int.class) {
                v = Integer.parseInt(value);
            } else if (t == long.class) {
                v = Long.parseLong(value);
            } else if (t == boolean.class) {
                v = Boolean.parseBoolean(value);
            } else if (t == String.class) {
                v = value;
            } else if (t.isEnum()) {
                v = Enum.valueOf(t.asSubclass(Enum.class), value);
            } else {
                continue;
            }
            m.invoke(cfg, v);
            return;
        }
        throw new IllegalArgumentException("MessageStoreConfig has no setter for " + key);
    }
}
