package org.rocketlake.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * What the Python planner decided for one snapshot: the commitlog splits (each starting on a
 * record start, see storelib.read.splits) and the bounds given as reader options.
 */
final class Plan implements Serializable {
    private static final long serialVersionUID = 1L;

    final String store;
    final List<Split> splits;
    final Bounds bounds;
    final int batchRows;

    private Plan(String store, List<Split> splits, Bounds bounds, int batchRows) {
        this.store = store;
        this.splits = splits;
        this.bounds = bounds;
        this.batchRows = batchRows;
    }

    /** One split: the records starting in [start, stop) of one segment file. */
    static final class Split implements org.apache.spark.sql.connector.read.InputPartition {
        private static final long serialVersionUID = 1L;
        final String file;      // absolute path of the segment
        final String rel;       // its name in the store, for messages
        final long base;        // the segment's first commitlog offset
        final long valid;       // its valid bytes
        final long start;
        final long stop;
        final Long minTs;       // the segment's store-time range (manifest), null if unknown
        final Long maxTs;

        Split(String file, String rel, long base, long valid, long start, long stop, Long minTs, Long maxTs) {
            this.file = file;
            this.rel = rel;
            this.base = base;
            this.valid = valid;
            this.start = start;
            this.stop = stop;
            this.minTs = minTs;
            this.maxTs = maxTs;
        }

        /** The segment's last split walks on like a broker's recovery; the others must end at stop. */
        boolean last() {
            return stop >= base + valid;
        }
    }

    static Plan parse(String json) {
        try {
            JsonNode root = new ObjectMapper().readTree(json);
            List<Split> splits = new ArrayList<>();
            for (JsonNode s : root.get("splits")) {
                splits.add(new Split(s.get(0).asText(), s.get(1).asText(), s.get(2).asLong(), s.get(3).asLong(),
                    s.get(4).asLong(), s.get(5).asLong(), optLong(s.get(6)), optLong(s.get(7))));
            }
            Bounds b = new Bounds();
            JsonNode jb = root.get("bounds");
            b.lowerTime(optLong(jb.get("begin")));
            b.upperTime(optLong(jb.get("end")));
            b.lowerOffset(optLong(jb.get("lo")));
            b.upperOffset(optLong(jb.get("hi")));
            JsonNode topics = jb.get("topics");
            if (topics != null && !topics.isNull()) {
                List<String> t = new ArrayList<>();
                for (JsonNode n : topics) {
                    t.add(n.asText());
                }
                b.topicIn(t);
            }
            return new Plan(root.get("store").asText(), splits, b, root.get("batch_rows").asInt());
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException("rocketmq source: unreadable plan: " + e.getMessage(), e);
        }
    }

    private static Long optLong(JsonNode n) {
        return n == null || n.isNull() ? null : n.asLong();
    }
}
