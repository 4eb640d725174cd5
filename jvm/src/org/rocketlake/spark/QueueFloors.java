package org.rocketlake.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The queues whose minimum offset is above 0 (storelib.read.queuemins): a walk of the segments
 * leaves out the queued records below it, as key lookups and consumers do. Looked up by the
 * record's topic bytes and queue id, with no allocation per record.
 */
final class QueueFloors implements Serializable {
    private static final long serialVersionUID = 1L;

    static final QueueFloors NONE = new QueueFloors(new byte[0][], new int[0], new long[0]);

    private final byte[][] topics;
    private final int[] queues;
    private final long[] mins;
    private final int[] slots;          // open addressing: entry + 1, 0 empty
    private final int mask;

    private QueueFloors(byte[][] topics, int[] queues, long[] mins) {
        this.topics = topics;
        this.queues = queues;
        this.mins = mins;
        int n = Integer.highestOneBit(Math.max(1, mins.length) * 4 - 1) << 1;
        slots = new int[n];
        mask = n - 1;
        for (int e = 0; e < mins.length; e++) {
            int i = hash(topics[e], 0, topics[e].length, queues[e]) & mask;
            while (slots[i] != 0) {
                i = (i + 1) & mask;
            }
            slots[i] = e + 1;
        }
    }

    /** [[topic, queue id, minimum offset]] of the plan; null or empty: none. */
    static QueueFloors parse(JsonNode entries) {
        if (entries == null || entries.isNull() || entries.size() == 0) {
            return NONE;
        }
        int n = entries.size();
        byte[][] t = new byte[n][];
        int[] q = new int[n];
        long[] m = new long[n];
        for (int e = 0; e < n; e++) {
            JsonNode x = entries.get(e);
            t[e] = x.get(0).asText().getBytes(StandardCharsets.UTF_8);
            q[e] = (int) x.get(1).asLong();
            m[e] = x.get(2).asLong();
        }
        return new QueueFloors(t, q, m);
    }

    boolean isEmpty() {
        return mins.length == 0;
    }

    /** The minimum offset of the queue (topic bytes {@code b[at, at + len)}, {@code queue}); Long.MIN_VALUE if none. */
    long floor(byte[] b, int at, int len, int queue) {
        int i = hash(b, at, len, queue) & mask;
        while (slots[i] != 0) {
            int e = slots[i] - 1;
            if (queues[e] == queue && Arrays.equals(topics[e], 0, topics[e].length, b, at, at + len)) {
                return mins[e];
            }
            i = (i + 1) & mask;
        }
        return Long.MIN_VALUE;
    }

    private static int hash(byte[] b, int at, int len, int queue) {
        int h = 31 * queue + len;
        for (int i = at; i < at + len; i++) {
            h = 31 * h + b[i];
        }
        return h ^ (h >>> 16);
    }
}
