package org.rocketlake.spark;

import static org.rocketlake.spark.Layout.*;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * One record's fields -> the requested message columns (storelib.format.records.MESSAGE_FIELDS),
 * with the Python decoder's meaning: hosts as Java's getHostAddress() text, the offset msgId in
 * upper-case hex, properties split like MessageDecoder.string2messageProperties (a later
 * duplicate name wins), text that is not UTF-8 replaced like Java's new String(bytes, UTF_8).
 */
final class RecordColumns {
    private static final byte[] HEX = "0123456789ABCDEF".getBytes(StandardCharsets.US_ASCII);

    private enum Col {
        COMMITLOG_OFFSET, STORE_SIZE, MSG_ID, TOPIC, QUEUE_ID, QUEUE_OFFSET, FLAG, SYS_FLAG, BODY_CRC, BORN_TIMESTAMP,
        BORN_HOST, STORE_TIMESTAMP, STORE_HOST, RECONSUME_TIMES, PREPARED_TRANSACTION_OFFSET, BODY, PROPERTIES, TAGS,
        KEYS, UNIQ_KEY
    }

    private final Col[] cols;
    private final boolean needProps;
    private final String rel;
    private final long base;

    // the record being decoded (positions in the chunk buffer)
    private int sysFlag;
    private int bornHostLen;
    private int storeHostAt;
    private int storeHostLen;
    private int bodyAt;
    private int bodyLen;
    private int topicAt;
    private int topicLen;
    private int propsAt;
    private int propsLen;

    // properties: kept (name, value) spans of the current record; props/propsOff may point into a
    // replaced copy when the stored bytes are not UTF-8
    private int[] spans = new int[64];
    private int pairs;
    private byte[] props;
    private int propsOff;

    private final byte[] scratch = new byte[128];
    private final HostText bornHosts = new HostText();
    private final HostText storeHosts = new HostText();

    RecordColumns(StructType required, String rel, long base) {
        StructField[] fields = required.fields();
        cols = new Col[fields.length];
        boolean p = false;
        for (int i = 0; i < fields.length; i++) {
            cols[i] = Col.valueOf(fields[i].name().toUpperCase(java.util.Locale.ROOT));
            p |= cols[i] == Col.PROPERTIES || cols[i] == Col.TAGS || cols[i] == Col.KEYS || cols[i] == Col.UNIQ_KEY;
        }
        needProps = p;
        this.rel = rel;
        this.base = base;
    }

    /** Decodes the record at {@code at} into row {@code row} if its topic is one of {@code topics}
     *  (null: any); false if it is not. A record whose parts do not fit inside it is corrupt. */
    boolean put(byte[] b, int at, long segPos, byte[][] topics, OnHeapColumnVector[] out, int row) {
        return put(b, at, segPos, topics, QueueFloors.NONE, out, row);
    }

    /** As above, and false for a queued record below its queue's minimum offset ({@code floors}). */
    boolean put(byte[] b, int at, long segPos, byte[][] topics, QueueFloors floors, OnHeapColumnVector[] out, int row) {
        int size = BatchReader.be32(b, at + POS_TOTALSIZE);
        if (!layout(b, at, size)) {
            throw Corrupt.at(rel, segPos, "damaged record (TOTALSIZE " + size + "): its fields do not fit inside it");
        }
        if (topics != null && !topicIn(b, topics)) {
            return false;
        }
        if (!floors.isEmpty()) {
            int tx = sysFlag & TRANSACTION_MASK;
            if ((tx == TRANSACTION_NOT || tx == TRANSACTION_COMMIT) && BatchReader.be64(b, at + POS_QUEUEOFFSET)
                    < floors.floor(b, topicAt, topicLen, BatchReader.be32(b, at + POS_QUEUEID))) {
                return false;
            }
        }
        if (needProps) {
            parseProperties(b);
        }
        for (int i = 0; i < cols.length; i++) {
            put(cols[i], b, at, size, out[i], row);
        }
        return true;
    }

    /** storelib.compute.kernels.record_layout: the variable parts' places; false if they do not
     *  fit inside TOTALSIZE. */
    private boolean layout(byte[] b, int at, int size) {
        if (size < POS_BORNHOST) {
            return false;
        }
        int end = at + size;
        sysFlag = BatchReader.be32(b, at + POS_SYSFLAG);
        bornHostLen = (sysFlag & FLAG_BORNHOST_V6) != 0 ? HOST_V6_SIZE : HOST_V4_SIZE;
        storeHostLen = (sysFlag & FLAG_STOREHOST_V6) != 0 ? HOST_V6_SIZE : HOST_V4_SIZE;
        int tl = BatchReader.be32(b, at + POS_MAGIC) == MAGIC_V2 ? TOPIC_LENGTH_SIZE_V2 : TOPIC_LENGTH_SIZE_V1;
        int p = at + POS_BORNHOST + bornHostLen;
        storeHostAt = p + REL_STOREHOST;
        p = storeHostAt + storeHostLen;
        if (p + REL_BODY > end) {
            return false;
        }
        bodyLen = BatchReader.be32(b, p + REL_BODYLENGTH);
        bodyAt = p + REL_BODY;
        if (bodyLen < 0 || (long) bodyAt + bodyLen + tl > end) {
            return false;
        }
        int q = bodyAt + bodyLen;
        topicLen = tl == TOPIC_LENGTH_SIZE_V2 ? (short) (((b[q] & 0xff) << 8) | (b[q + 1] & 0xff)) : b[q];
        if (topicLen < 0 || q + tl + topicLen + SIZE_PROPERTIESLENGTH > end) {
            return false;
        }
        topicAt = q + tl;
        q = topicAt + topicLen;
        propsLen = ((b[q] & 0xff) << 8) | (b[q + 1] & 0xff);
        if (propsLen >= 32768) {
            propsLen = 0;                   // Java reads a signed short: negative means none
        }
        propsAt = q + SIZE_PROPERTIESLENGTH;
        return propsAt + propsLen <= end;
    }

    private boolean topicIn(byte[] b, byte[][] topics) {
        for (byte[] t : topics) {
            if (t.length == topicLen && java.util.Arrays.equals(b, topicAt, topicAt + topicLen, t, 0, t.length)) {
                return true;
            }
        }
        if (ascii(b, topicAt, topicLen)) {
            return false;
        }
        byte[] text = utf8(b, topicAt, topicLen);       // a damaged topic, read as Java would
        for (byte[] t : topics) {
            if (java.util.Arrays.equals(text, t)) {
                return true;
            }
        }
        return false;
    }

    private void put(Col c, byte[] b, int at, int size, WritableColumnVector v, int row) {
        switch (c) {
            case COMMITLOG_OFFSET: v.putLong(row, BatchReader.be64(b, at + POS_PHYSICALOFFSET)); break;
            case STORE_SIZE: v.putInt(row, size); break;
            case MSG_ID: v.putByteArray(row, scratch, 0, msgId(b, at)); break;
            case TOPIC: putText(v, row, b, topicAt, topicLen); break;
            case QUEUE_ID: v.putInt(row, BatchReader.be32(b, at + POS_QUEUEID)); break;
            case QUEUE_OFFSET: v.putLong(row, BatchReader.be64(b, at + POS_QUEUEOFFSET)); break;
            case FLAG: v.putInt(row, BatchReader.be32(b, at + POS_FLAG)); break;
            case SYS_FLAG: v.putInt(row, sysFlag); break;
            case BODY_CRC: v.putInt(row, BatchReader.be32(b, at + POS_BODYCRC)); break;
            case BORN_TIMESTAMP: v.putLong(row, BatchReader.be64(b, at + POS_BORNTIMESTAMP)); break;
            case BORN_HOST: bornHosts.put(v, row, b, at + POS_BORNHOST, bornHostLen); break;
            case STORE_TIMESTAMP:
                v.putLong(row, BatchReader.be64(b, at + POS_BORNHOST + bornHostLen + REL_STORETIMESTAMP)); break;
            case STORE_HOST: storeHosts.put(v, row, b, storeHostAt, storeHostLen); break;
            case RECONSUME_TIMES: v.putInt(row, BatchReader.be32(b, storeHostAt + storeHostLen + REL_RECONSUMETIMES)); break;
            case PREPARED_TRANSACTION_OFFSET:
                v.putLong(row, BatchReader.be64(b, storeHostAt + storeHostLen + REL_PREPARED_TX_OFFSET)); break;
            case BODY: v.putByteArray(row, b, bodyAt, bodyLen); break;
            case PROPERTIES: putMap(v, row); break;
            case TAGS: putProperty(v, row, PROPERTY_TAGS); break;
            case KEYS: putProperty(v, row, PROPERTY_KEYS); break;
            case UNIQ_KEY: putProperty(v, row, PROPERTY_UNIQ_KEY); break;
            default: throw new IllegalStateException(c.name());
        }
    }

    /** Upper-case hex of (store host bytes ++ PHYSICALOFFSET) into {@code scratch}; its length. */
    private int msgId(byte[] b, int at) {
        int n = 0;
        for (int i = 0; i < storeHostLen; i++) {
            int x = b[storeHostAt + i] & 0xff;
            scratch[n++] = HEX[x >>> 4];
            scratch[n++] = HEX[x & 15];
        }
        for (int i = 0; i < SIZE_PHYSICALOFFSET; i++) {
            int x = b[at + POS_PHYSICALOFFSET + i] & 0xff;
            scratch[n++] = HEX[x >>> 4];
            scratch[n++] = HEX[x & 15];
        }
        return n;
    }

    // ------------------------------------------------------------------ properties
    private void parseProperties(byte[] b) {
        props = b;
        propsOff = propsAt;
        int len = propsLen;
        if (!ascii(b, propsAt, propsLen)) {
            byte[] text = utf8(b, propsAt, propsLen);
            props = text;
            propsOff = 0;
            len = text.length;
        }
        pairs = 0;
        int i = propsOff;
        int end = propsOff + len;
        while (i < end) {
            int j = i;
            while (j < end && props[j] != PROPERTY_SEP) {
                j++;
            }
            int sep = i;
            while (sep < j && props[sep] != PROPERTY_NAME_VALUE_SEP) {
                sep++;
            }
            if (i < sep && sep < j - 1) {
                for (int q = 0; q < pairs; q++) {       // a later duplicate name wins
                    int s = spans[4 * q];
                    if (s >= 0 && spans[4 * q + 1] - s == sep - i
                        && java.util.Arrays.equals(props, s, spans[4 * q + 1], props, i, sep)) {
                        spans[4 * q] = -1;
                    }
                }
                if (4 * pairs + 4 > spans.length) {
                    spans = java.util.Arrays.copyOf(spans, spans.length * 2);
                }
                spans[4 * pairs] = i;
                spans[4 * pairs + 1] = sep;
                spans[4 * pairs + 2] = sep + 1;
                spans[4 * pairs + 3] = j;
                pairs++;
            }
            i = j + 1;
        }
    }

    private void putMap(WritableColumnVector v, int row) {
        WritableColumnVector keys = v.getChild(0);
        WritableColumnVector values = v.getChild(1);
        int first = row == 0 ? 0 : v.getArrayOffset(row - 1) + v.getArrayLength(row - 1);
        int n = 0;
        for (int q = 0; q < pairs; q++) {
            if (spans[4 * q] >= 0) {
                n++;
            }
        }
        keys.reserve(first + n);
        values.reserve(first + n);
        int k = first;
        for (int q = 0; q < pairs; q++) {
            int s = spans[4 * q];
            if (s >= 0) {
                keys.putByteArray(k, props, s, spans[4 * q + 1] - s);
                values.putByteArray(k, props, spans[4 * q + 2], spans[4 * q + 3] - spans[4 * q + 2]);
                k++;
            }
        }
        v.putArray(row, first, n);
    }

    private void putProperty(WritableColumnVector v, int row, byte[] name) {
        for (int q = pairs - 1; q >= 0; q--) {
            int s = spans[4 * q];
            if (s >= 0 && spans[4 * q + 1] - s == name.length
                && java.util.Arrays.equals(props, s, spans[4 * q + 1], name, 0, name.length)) {
                v.putByteArray(row, props, spans[4 * q + 2], spans[4 * q + 3] - spans[4 * q + 2]);
                return;
            }
        }
        v.putNull(row);
    }

    // ------------------------------------------------------------------ text
    private static boolean ascii(byte[] b, int at, int n) {
        for (int i = at; i < at + n; i++) {
            if (b[i] < 0) {
                return false;
            }
        }
        return true;
    }

    /** The bytes as Java's new String(bytes, UTF_8) would give them back (invalid ones replaced). */
    static byte[] utf8(byte[] b, int at, int n) {
        try {
            StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(b, at, n));
            return java.util.Arrays.copyOfRange(b, at, at + n);
        } catch (CharacterCodingException e) {
            return new String(b, at, n, StandardCharsets.UTF_8).getBytes(StandardCharsets.UTF_8);
        }
    }

    private static void putText(WritableColumnVector v, int row, byte[] b, int at, int n) {
        if (ascii(b, at, n)) {
            v.putByteArray(row, b, at, n);
        } else {
            byte[] t = utf8(b, at, n);
            v.putByteArray(row, t, 0, t.length);
        }
    }

    /** Host bytes -> "a.b.c.d:port" / "[v6 groups]:port" (InetAddress.getHostAddress()), the last
     *  host remembered: a store has few hosts. */
    private static final class HostText {
        private final byte[] last = new byte[HOST_V6_SIZE];
        private int lastLen = -1;
        private byte[] text = new byte[0];

        void put(WritableColumnVector v, int row, byte[] b, int at, int n) {
            if (n != lastLen || !java.util.Arrays.equals(b, at, at + n, last, 0, n)) {
                System.arraycopy(b, at, last, 0, n);
                lastLen = n;
                text = format(b, at, n).getBytes(StandardCharsets.US_ASCII);
            }
            v.putByteArray(row, text, 0, text.length);
        }

        private static String format(byte[] b, int at, int n) {
            int addr = n - HOST_PORT_SIZE;
            int port = BatchReader.be32(b, at + addr);
            StringBuilder sb = new StringBuilder(48);
            if (addr == 4) {
                sb.append(b[at] & 0xff).append('.').append(b[at + 1] & 0xff).append('.')
                    .append(b[at + 2] & 0xff).append('.').append(b[at + 3] & 0xff);
            } else {
                sb.append('[');
                for (int i = 0; i < addr; i += 2) {
                    if (i > 0) {
                        sb.append(':');
                    }
                    sb.append(Integer.toHexString(((b[at + i] & 0xff) << 8) | (b[at + i + 1] & 0xff)));
                }
                sb.append(']');
            }
            return sb.append(':').append(port).toString();
        }
    }
}
