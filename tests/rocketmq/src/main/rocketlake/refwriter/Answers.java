package rocketlake.refwriter;

import java.io.BufferedReader;
import java.io.File;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * RocketMQ's own answers on a store it wrote: the store is opened again (load, start: the
 * broker's view after a restart), every query of a queries file is answered, and the store is
 * shut down. The checkpoint file is put back as the write run left it (the re-open writes its
 * confirmPhyOffset), so the written bytes can still be compared.
 *
 * <p>queries.tsv, one per line, tab-separated: qid, type, then the arguments in the order of
 * docs/FORMAT.md §7.2 (strings base64 UTF-8). answers.jsonl: one JSON object per query, the
 * fields of §7.2; a message as {@link #message}; a query RocketMQ fails with an exception gets
 * {@code rocketmq_error} (the exception's class) instead.
 */
final class Answers {
    private Answers() {
    }

    static void answer(MessageStoreConfig cfg, List<String> batchCQTopics, String storeDir, String queriesPath, String answersPath) throws Exception {
        File ck = new File(storeDir, "checkpoint");
        byte[] checkpoint = Files.readAllBytes(ck.toPath());
        DefaultMessageStore store = Compat.newStore(cfg, null, new BrokerStatsManager("DefaultCluster", false), batchCQTopics);
        StringBuilder out = new StringBuilder();
        try {
            if (!store.load()) {
                throw new IllegalStateException("DefaultMessageStore.load() failed for " + storeDir);
            }
            store.start();
            try (BufferedReader r = Files.newBufferedReader(new File(queriesPath).toPath(), StandardCharsets.UTF_8)) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.isEmpty()) {
                        continue;
                    }
                    String[] q = line.split("\t", -1);
                    try {
                        out.append(one(store, q)).append('\n');
                    } catch (RuntimeException e) {
                        // RocketMQ itself fails this query: there is no answer to compare
                        out.append(new Json().field("qid", Long.parseLong(q[0])).field("type", q[1])
                            .field("rocketmq_error", e.getClass().getName())).append('\n');
                    }
                }
            }
        } finally {
            store.shutdown();
            Files.write(ck.toPath(), checkpoint);
        }
        Files.write(new File(answersPath).toPath(), out.toString().getBytes(StandardCharsets.UTF_8));
    }

    /** CommitLog.BLANK_MAGIC_CODE (the end-of-file filler's magic; the same in 4.9 and 5.x). */
    static final int BLANK_MAGIC_CODE = -875286124;

    static String s(String b64) {
        return new String(Base64.getDecoder().decode(b64), StandardCharsets.UTF_8);
    }

    static String one(DefaultMessageStore store, String[] q) throws Exception {
        Json j = new Json().field("qid", Long.parseLong(q[0])).field("type", q[1]);
        switch (q[1]) {
            case "queryMessage": {
                QueryMessageResult r = store.queryMessage(s(q[2]), s(q[3]), Integer.parseInt(q[4]),
                    Long.parseLong(q[5]), Long.parseLong(q[6]));
                List<Object> msgs = new ArrayList<>();
                List<Object> po = new ArrayList<>();
                for (ByteBuffer b : r.getMessageBufferList()) {
                    long offset = b.getLong(b.position() + 28);          // the record's PHYSICALOFFSET
                    po.add(offset);
                    msgs.add(message(b.slice(), offset));
                }
                j.field("phy_offsets", po).field("messages", msgs)
                    .field("index_last_update_timestamp", r.getIndexLastUpdateTimestamp())
                    .field("index_last_update_phyoffset", r.getIndexLastUpdatePhyoffset());
                r.release();
                break;
            }
            case "getMessage": {
                GetMessageResult r = store.getMessage(s(q[2]), s(q[3]), Integer.parseInt(q[4]), Long.parseLong(q[5]),
                    Integer.parseInt(q[6]), null);
                List<Object> qo = new ArrayList<>();
                List<Object> po = new ArrayList<>();
                List<Object> msgs = new ArrayList<>();
                if (r != null) {
                    for (SelectMappedBufferResult b : r.getMessageMapedList()) {
                        Json m = message(b.getByteBuffer().slice(), b.getStartOffset());
                        qo.add(m.get("queue_offset"));
                        po.add(b.getStartOffset());
                        msgs.add(m);
                    }
                    j.field("status", r.getStatus().name()).field("next_begin_offset", r.getNextBeginOffset())
                        .field("min_offset", r.getMinOffset()).field("max_offset", r.getMaxOffset());
                    r.release();
                } else {
                    j.field("status", null);
                }
                j.field("queue_offsets", qo).field("phy_offsets", po).field("messages", msgs);
                break;
            }
            case "lookMessageByOffset": {
                MessageExt m = store.lookMessageByOffset(Long.parseLong(q[2]));
                j.field("message", m == null ? null : bySize(store, m.getCommitLogOffset()));
                break;
            }
            case "viewMessageById": {
                long offset = MessageDecoder.decodeMessageId(q[2]).getOffset();
                MessageExt m = store.lookMessageByOffset(offset);
                j.field("decoded_offset", offset).field("message", m == null ? null : bySize(store, offset));
                break;
            }
            case "getOffsetInQueueByTime":
                j.field("result", Compat.offsetInQueueByTime(store, s(q[2]), Integer.parseInt(q[3]), Long.parseLong(q[4]), q[5]));
                break;
            case "getMinOffsetInQueue":
                j.field("result", store.getMinOffsetInQueue(s(q[2]), Integer.parseInt(q[3])));
                break;
            case "getMaxOffsetInQueue":
                j.field("result", store.getMaxOffsetInQueue(s(q[2]), Integer.parseInt(q[3])));
                break;
            case "getCommitLogOffsetInQueue":
                j.field("result", store.getCommitLogOffsetInQueue(s(q[2]), Integer.parseInt(q[3]), Long.parseLong(q[4])));
                break;
            case "getMessageStoreTimeStamp":
                j.field("result", store.getMessageStoreTimeStamp(s(q[2]), Integer.parseInt(q[3]), Long.parseLong(q[4])));
                break;
            case "getEarliestMessageTime":
                j.field("result", q.length > 2 ? store.getEarliestMessageTime(s(q[2]), Integer.parseInt(q[3]))
                    : store.getEarliestMessageTime());
                break;
            case "scanCommitLog": {
                // every record from getMinPhyOffset to getMaxPhyOffset, read as the broker reads
                // one (selectOneMessageByOffset), a segment's end blank skipped to the next file
                int fileSize = store.getMessageStoreConfig().getMappedFileSizeCommitLog();
                List<Object> msgs = new ArrayList<>();
                long off = store.getMinPhyOffset();
                long max = store.getMaxPhyOffset();
                while (off >= 0 && off < max) {
                    SelectMappedBufferResult r = store.selectOneMessageByOffset(off);
                    if (r == null) {
                        throw new IllegalStateException("no record at commit-log offset " + off);
                    }
                    try {
                        ByteBuffer b = r.getByteBuffer().slice();
                        if (b.getInt(4) == BLANK_MAGIC_CODE) {
                            off = off - off % fileSize + fileSize;
                            continue;
                        }
                        msgs.add(message(b, off));
                        off += b.getInt(0);
                    } finally {
                        r.release();
                    }
                }
                j.field("messages", msgs);
                break;
            }
            case "getMinPhyOffset":
                j.field("result", store.getMinPhyOffset());
                break;
            case "getMaxPhyOffset":
                j.field("result", store.getMaxPhyOffset());
                break;
            default:
                throw new IllegalArgumentException("unknown query type " + q[1]);
        }
        return j.toString();
    }

    /** The whole record at a commit-log offset (lookMessageByOffset reads it by its size). */
    static Json bySize(DefaultMessageStore store, long offset) throws Exception {
        SelectMappedBufferResult head = store.selectOneMessageByOffset(offset);
        try {
            return message(head.getByteBuffer().slice(), offset);
        } finally {
            head.release();
        }
    }

    static Json message(ByteBuffer bb, long offset) throws Exception {
        int size = bb.getInt(0);
        ByteBuffer copy = bb.duplicate();
        MessageExt m = MessageDecoder.decode(copy, true, false);
        byte[] body = m.getBody() == null ? new byte[0] : m.getBody();
        Map<String, String> props = new TreeMap<>();
        if (m.getProperties() != null) {        // null for a record without properties
            props.putAll(m.getProperties());
        }
        List<Object> sorted = new ArrayList<>();
        for (Map.Entry<String, String> e : props.entrySet()) {
            List<Object> pair = new ArrayList<>();
            pair.add(e.getKey());
            pair.add(e.getValue());
            sorted.add(pair);
        }
        StringBuilder sha = new StringBuilder();
        for (byte b : MessageDigest.getInstance("SHA-256").digest(body)) {
            sha.append(String.format("%02x", b & 0xff));
        }
        return new Json().field("commitlog_offset", offset).field("store_size", size).field("topic", m.getTopic())
            .field("queue_id", m.getQueueId()).field("queue_offset", m.getQueueOffset()).field("flag", m.getFlag())
            .field("sys_flag", m.getSysFlag()).field("body_crc", m.getBodyCRC())
            .field("born_timestamp", m.getBornTimestamp()).field("born_host", host(m.getBornHost()))
            .field("store_timestamp", m.getStoreTimestamp()).field("store_host", host(m.getStoreHost()))
            .field("reconsume_times", m.getReconsumeTimes())
            .field("prepared_transaction_offset", m.getPreparedTransactionOffset())
            .field("body_len", body.length).field("body_sha256", sha.toString()).field("properties_sorted", sorted);
    }

    static List<Object> host(java.net.SocketAddress a) {
        InetSocketAddress i = (InetSocketAddress) a;
        List<Object> out = new ArrayList<>();
        out.add(i.getAddress().getHostAddress());
        out.add(i.getPort());
        return out;
    }

    /** A JSON object written by hand (no JSON library is common to both lines' classpaths). */
    static final class Json {
        private final Map<String, Object> fields = new java.util.LinkedHashMap<>();

        Json field(String k, Object v) {
            fields.put(k, v);
            return this;
        }

        Object get(String k) {
            return fields.get(k);
        }

        @Override
        public String toString() {
            StringBuilder b = new StringBuilder();
            write(b, this);
            return b.toString();
        }

        static void write(StringBuilder b, Object v) {
            if (v == null) {
                b.append("null");
            } else if (v instanceof Json) {
                b.append('{');
                boolean first = true;
                for (Map.Entry<String, Object> e : ((Json) v).fields.entrySet()) {
                    if (!first) {
                        b.append(',');
                    }
                    first = false;
                    write(b, e.getKey());
                    b.append(':');
                    write(b, e.getValue());
                }
                b.append('}');
            } else if (v instanceof List) {
                b.append('[');
                boolean first = true;
                for (Object x : (List<?>) v) {
                    if (!first) {
                        b.append(',');
                    }
                    first = false;
                    write(b, x);
                }
                b.append(']');
            } else if (v instanceof String) {
                b.append('"');
                for (char c : ((String) v).toCharArray()) {
                    if (c == '"' || c == '\\') {
                        b.append('\\').append(c);
                    } else if (c < 0x20 || c >= 0x7f) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
                b.append('"');
            } else {
                b.append(v.toString());
            }
        }
    }
}
