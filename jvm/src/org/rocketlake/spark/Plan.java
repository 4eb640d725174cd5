package org.rocketlake.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * What the Python planner decided for one snapshot: the commitlog splits (each starting on a
 * record start, see storelib.read.splits) and the bounds given as reader options.
 */
final class Plan implements Serializable {
    private static final long serialVersionUID = 1L;
    static final int TASKS_PER_CORE = 1;    // (docs/PERFORMANCE.md, "Reading a store on S3")

    final String store;
    final List<Split> splits;
    final Bounds bounds;
    final int batchRows;
    // topic -> its queues, each its files in order; null when a topic filter must walk (some live
    // record has no unit, or a unit is not a record's: storelib.read.splits.queue_plan_ok)
    final Map<String, List<List<QueueFile>>> queues;
    // the store is on a Hadoop file system (s3a://, hdfs://), read through the session's Hadoop settings
    final boolean remote;
    // remote queue reads: records this close are fetched in one range read
    final long gapBytes;
    // remote split reads: bytes per range read, and range reads in flight ahead of the one decoded
    final int windowBytes;
    final int readAhead;
    // remote: the splits (narrowed to a time range's zones) are cut on zone starts into about this
    // many tasks per core of the session, of about equal bytes (not for a topic read through the
    // queues); 0: as planned
    final int tasksPerCore;
    // the committed batch the plan's files are of ({"batch_id", "batch_seq"}, as JSON text; null: a
    // broker's store): named with a missing file, so that the driver can tell a file an expiry
    // after that batch deleted from one the store lost (storelib.read.jvmsource)
    final String batch;
    // option minPartitions: at least this many tasks where the splits' zones allow; 0: not given
    final int minPartitions;

    private Plan(String store, List<Split> splits, Bounds bounds, int batchRows,
                 Map<String, List<List<QueueFile>>> queues, boolean remote, long gapBytes, int windowBytes,
                 int readAhead, int tasksPerCore, String batch, int minPartitions) {
        this.store = store;
        this.splits = splits;
        this.bounds = bounds;
        this.batchRows = batchRows;
        this.queues = queues;
        this.remote = remote;
        this.gapBytes = gapBytes;
        this.windowBytes = windowBytes;
        this.readAhead = readAhead;
        this.tasksPerCore = tasksPerCore;
        this.batch = batch;
        this.minPartitions = minPartitions;
    }

    /** A consume-queue file: its valid units. */
    static final class QueueFile implements Serializable {
        private static final long serialVersionUID = 1L;
        final String file;
        final String rel;
        final long units;
        final Source source;

        QueueFile(String file, String rel, long units, Source source) {
            this.file = file;
            this.rel = rel;
            this.units = units;
            this.source = source;
        }
    }

    /** A file on an object store assembled from extents of objects (storelib.io.fragments):
     *  extent k holds the file's bytes [filePos[k], filePos[k] + length[k]) at objectPos[k] of
     *  objects[k] (a URI); bytes below size that no extent covers are zeros. */
    static final class Source implements Serializable {
        private static final long serialVersionUID = 1L;
        final long size;
        final long[] filePos;
        final long[] length;
        final String[] objects;
        final long[] objectPos;

        Source(long size, long[] filePos, long[] length, String[] objects, long[] objectPos) {
            this.size = size;
            this.filePos = filePos;
            this.length = length;
            this.objects = objects;
            this.objectPos = objectPos;
        }

        /** The first extent ending after {@code pos} (extents are sorted, not overlapping). */
        int first(long pos) {
            int lo = 0;
            int hi = filePos.length;
            while (lo < hi) {
                int mid = (lo + hi) >>> 1;
                if (filePos[mid] + length[mid] <= pos) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            return lo;
        }

        static Source parse(JsonNode n) {
            if (n == null || n.isNull()) {
                return null;
            }
            JsonNode e = n.get(1);
            int k = e.size();
            Source s = new Source(n.get(0).asLong(), new long[k], new long[k], new String[k], new long[k]);
            for (int i = 0; i < k; i++) {
                s.filePos[i] = e.get(i).get(0).asLong();
                s.length[i] = e.get(i).get(1).asLong();
                s.objects[i] = e.get(i).get(2).asText();
                s.objectPos[i] = e.get(i).get(3).asLong();
            }
            return s;
        }
    }

    /** A split of a topic filter, read through the topics' queues. */
    static final class QueueSplit implements org.apache.spark.sql.connector.read.InputPartition {
        private static final long serialVersionUID = 1L;
        final Split split;
        final List<List<QueueFile>> queues;

        QueueSplit(Split split, List<List<QueueFile>> queues) {
            this.split = split;
            this.queues = queues;
        }
    }

    /** The queue splits of {@code s} for {@code topics}, or null when there is no queue plan. */
    QueueSplit queueSplit(Split s, java.util.Set<String> topics) {
        if (queues == null || topics == null) {
            return null;
        }
        List<List<QueueFile>> qs = new ArrayList<>();
        for (String t : topics) {
            qs.addAll(queues.getOrDefault(t, List.of()));
        }
        return new QueueSplit(s, qs);
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
        final Long minTs;       // the split's store-time range (manifest), null if unknown
        final Long maxTs;
        // The split's zones (storelib.table.zonemap), null if it has none: zone k's records are those
        // starting in [zoneStart[k], zoneStart[k + 1]) (the last zone's: up to stop).
        final long[] zoneStart;
        final long[] zoneMinTs;
        final long[] zoneMaxTs;
        final Source source;    // its extents on an object store; null: the file itself

        Split(String file, String rel, long base, long valid, long start, long stop, Long minTs, Long maxTs,
              long[] zoneStart, long[] zoneMinTs, long[] zoneMaxTs, Source source) {
            this.file = file;
            this.rel = rel;
            this.base = base;
            this.valid = valid;
            this.start = start;
            this.stop = stop;
            this.minTs = minTs;
            this.maxTs = maxTs;
            this.zoneStart = zoneStart;
            this.zoneMinTs = zoneMinTs;
            this.zoneMaxTs = zoneMaxTs;
            this.source = source;
        }

        /** The split cut down to its runs of zones whose time range meets [begin, end] (itself
         *  when it has no zones or no time bound is given). */
        List<Split> narrow(Long begin, Long end) {
            if (zoneStart == null || (begin == null && end == null)) {
                return List.of(this);
            }
            List<Split> out = new ArrayList<>();
            int n = zoneStart.length;
            for (int k = 0; k < n; ) {
                if (!meets(k, begin, end)) {
                    k++;
                    continue;
                }
                int j = k;
                long lo = zoneMinTs[k];
                long hi = zoneMaxTs[k];
                while (j + 1 < n && meets(j + 1, begin, end)) {
                    j++;
                    lo = Math.min(lo, zoneMinTs[j]);
                    hi = Math.max(hi, zoneMaxTs[j]);
                }
                long runStop = j + 1 < n ? zoneStart[j + 1] : stop;
                out.add(new Split(file, rel, base, valid, zoneStart[k], runStop, lo, hi,
                    java.util.Arrays.copyOfRange(zoneStart, k, j + 1), java.util.Arrays.copyOfRange(zoneMinTs, k, j + 1),
                    java.util.Arrays.copyOfRange(zoneMaxTs, k, j + 1), source));
                k = j + 1;
            }
            return out;
        }

        /** {@code splits} with each one that has zones cut on zone starts into pieces of about
         *  total / {@code tasks} bytes (a split without zones, or one zone, stays whole), after
         *  joining the splits of one segment that follow each other: the planner's splits of a
         *  segment (about 256 MiB each, the last one shorter) would otherwise be tasks of unequal
         *  bytes, in waves (four of 256, 256, 256 and 70 MiB on two cores: one core reads 61%). */
        static List<Split> even(List<Split> splits, long tasks) {
            splits = joined(splits);
            long total = 0;
            for (Split s : splits) {
                total += s.stop - s.start;
            }
            long target = Math.max(1, total / Math.max(1, tasks));
            List<Split> out = new ArrayList<>();
            for (Split s : splits) {
                int n = s.zoneStart == null ? 0 : s.zoneStart.length;
                long pieces = Math.round((double) (s.stop - s.start) / target);
                if (n < 2 || pieces < 2) {
                    out.add(s);
                    continue;
                }
                int k = 0;
                for (long p = 1; p <= pieces && k < n; p++) {
                    long want = s.start + (s.stop - s.start) * p / pieces;
                    int j = k + 1;                     // the first zone of the next piece: its start nearest want
                    while (j < n && s.zoneStart[j] < want) {
                        j++;
                    }
                    if (j < n && j > k + 1 && want - s.zoneStart[j - 1] < s.zoneStart[j] - want) {
                        j--;
                    }
                    if (p == pieces) {
                        j = n;
                    }
                    if (j > k) {
                        out.add(s.zones(k, j));
                        k = j;
                    }
                }
            }
            return out;
        }

        /** {@code splits} with each run of splits of one file, each with zones, each starting
         *  where the one before stops, as one split. */
        static List<Split> joined(List<Split> splits) {
            List<Split> out = new ArrayList<>();
            for (Split s : splits) {
                Split last = out.isEmpty() ? null : out.get(out.size() - 1);
                if (last != null && last.zoneStart != null && s.zoneStart != null && last.file.equals(s.file)
                    && last.stop == s.start) {
                    out.set(out.size() - 1, new Split(s.file, s.rel, s.base, s.valid, last.start, s.stop,
                        last.minTs == null || s.minTs == null ? null : Math.min(last.minTs, s.minTs),
                        last.maxTs == null || s.maxTs == null ? null : Math.max(last.maxTs, s.maxTs),
                        concat(last.zoneStart, s.zoneStart), concat(last.zoneMinTs, s.zoneMinTs),
                        concat(last.zoneMaxTs, s.zoneMaxTs), s.source));
                } else {
                    out.add(s);
                }
            }
            return out;
        }

        private static long[] concat(long[] a, long[] b) {
            long[] out = java.util.Arrays.copyOf(a, a.length + b.length);
            System.arraycopy(b, 0, out, a.length, b.length);
            return out;
        }

        /** The split of zones [k, j) (j: past the last zone, the split's stop). */
        private Split zones(int k, int j) {
            long lo = Long.MAX_VALUE;
            long hi = Long.MIN_VALUE;
            for (int z = k; z < j; z++) {
                lo = Math.min(lo, zoneMinTs[z]);
                hi = Math.max(hi, zoneMaxTs[z]);
            }
            return new Split(file, rel, base, valid, zoneStart[k], j < zoneStart.length ? zoneStart[j] : stop, lo, hi,
                java.util.Arrays.copyOfRange(zoneStart, k, j), java.util.Arrays.copyOfRange(zoneMinTs, k, j),
                java.util.Arrays.copyOfRange(zoneMaxTs, k, j), source);
        }

        private boolean meets(int k, Long begin, Long end) {
            return !((begin != null && zoneMaxTs[k] < begin) || (end != null && zoneMinTs[k] > end));
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
                JsonNode z = s.get(8);
                long[][] zones = null;
                if (z != null && !z.isNull()) {
                    zones = new long[3][z.size()];
                    for (int k = 0; k < z.size(); k++) {
                        for (int c = 0; c < 3; c++) {
                            zones[c][k] = z.get(k).get(c).asLong();
                        }
                    }
                }
                splits.add(new Split(s.get(0).asText(), s.get(1).asText(), s.get(2).asLong(), s.get(3).asLong(),
                    s.get(4).asLong(), s.get(5).asLong(), optLong(s.get(6)), optLong(s.get(7)),
                    zones == null ? null : zones[0], zones == null ? null : zones[1], zones == null ? null : zones[2],
                    Source.parse(s.get(9))));
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
            b.floors = QueueFloors.parse(root.get("queue_mins"));
            Map<String, List<List<QueueFile>>> queues = null;
            JsonNode jq = root.get("queues");
            if (jq != null && !jq.isNull()) {
                queues = new HashMap<>();
                for (var e : (Iterable<Map.Entry<String, JsonNode>>) jq::fields) {
                    List<List<QueueFile>> qs = new ArrayList<>();
                    for (JsonNode q : e.getValue()) {
                        List<QueueFile> fs = new ArrayList<>();
                        for (JsonNode f : q) {
                            fs.add(new QueueFile(f.get(0).asText(), f.get(1).asText(), f.get(2).asLong(), Source.parse(f.get(3))));
                        }
                        qs.add(fs);
                    }
                    queues.put(e.getKey(), qs);
                }
            }
            JsonNode remote = root.get("remote");
            return new Plan(root.get("store").asText(), splits, b, root.get("batch_rows").asInt(), queues,
                remote != null && remote.asBoolean(), root.has("gap_bytes") ? root.get("gap_bytes").asLong() : 0,
                root.has("window_bytes") ? root.get("window_bytes").asInt() : SplitReader.WINDOW,
                root.has("read_ahead") ? root.get("read_ahead").asInt() : SplitReader.READ_AHEAD,
                root.has("tasks_per_core") ? root.get("tasks_per_core").asInt() : TASKS_PER_CORE,
                root.has("batch") && !root.get("batch").isNull() ? root.get("batch").toString() : null,
                root.has("min_partitions") && !root.get("min_partitions").isNull()
                    ? Math.max(1, root.get("min_partitions").asInt()) : 0);
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException("rocketmq source: unreadable plan: " + e.getMessage(), e);
        }
    }

    private static Long optLong(JsonNode n) {
        return n == null || n.isNull() ? null : n.asLong();
    }
}
