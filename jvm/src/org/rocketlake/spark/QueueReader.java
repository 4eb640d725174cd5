package org.rocketlake.spark;

import static org.rocketlake.spark.Layout.*;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A topic filter's split, read through the topics' consume queues (storelib.read.splits' queue
 * splits): the units pointing into [start, stop) say where the topic's records are, so only those
 * records are read, from the split's bytes memory-mapped (a page holding none of them is never
 * touched, and no other record's header is parsed). Every record is checked against its unit
 * (PHYSICALOFFSET and TOTALSIZE) and its topic; rows come in commitlog order, as a walk gives them.
 * Planned only for snapshots where every live record has exactly one live unit. On a remote file
 * system the records are fetched by range reads, each over a run of units whose records lie at
 * most the plan's gap apart (and at most {@link #RANGE} long): the bytes between the
 * topic's records are fetched only where skipping them would cost more requests than bytes; the
 * next range is read in the background while one is decoded. Where those ranges would cover more
 * than half the split's bytes (a topic spread evenly over the commitlog), the split is walked
 * instead (a {@link SplitReader} with the same bounds: the same rows, in the same order).
 */
final class QueueReader extends BatchReader {
    static final int RANGE = 8 << 20;      // the longest range read of a topic's records
    private final Plan.QueueSplit qs;

    private long[] phys;
    private int[] size;
    private int next;                 // the next unit to read
    private ByteBuffer map;           // [mapStart, mapStart + limit) of the segment: mapped, all units' records
    private long mapStart;
    private final long gapBytes;
    private int aheadUnit;
    private byte[] buf = new byte[1 << 12];

    // remote: the split walked instead, when the ranges of its units would fetch most of its bytes
    private SplitReader walk;
    private final StructType required;
    private final int window;
    private final int readAhead;

    QueueReader(Plan.QueueSplit qs, StructType required, Bounds bounds, int batchRows,
                java.util.Map<String, String> hadoop, long gapBytes, int window, int readAhead) {
        super(qs.split, required, bounds, batchRows, hadoop);
        this.qs = qs;
        this.gapBytes = gapBytes;
        this.required = required;
        this.window = window;
        this.readAhead = readAhead;
    }

    @Override
    public boolean next() throws IOException {
        if (phys == null) {
            units();
            if (!file.mapped() && 2 * covered() > split.stop - split.start) {
                // a topic spread over the split: its ranges fetch most of the bytes anyway, and a
                // walk of them (windows read ahead, no units to match) costs less than the ranges
                walk = new SplitReader(split, required, bounds, batchRows, hadoop, window, readAhead);
            } else {
                mapUnits();
            }
        }
        return walk != null ? walk.next() : super.next();
    }

    @Override
    public ColumnarBatch get() {
        return walk != null ? walk.get() : super.get();
    }

    @Override
    public void close() throws IOException {
        if (walk != null) {
            walk.close();
        }
        super.close();
    }

    /** The bytes the ranges of the units would fetch. */
    private long covered() {
        long out = 0;
        for (int k = 0; k < phys.length; ) {
            int j = rangeEnd(k);
            long end = 0;
            for (int u = k; u < j; u++) {
                end = Math.max(end, phys[u] + size[u]);
            }
            out += end - phys[k];
            k = j;
        }
        return out;
    }

    @Override
    int fill() throws IOException {
        int rows = 0;
        while (rows < batchRows && next < phys.length) {
            rows += record(next++, rows);
        }
        return rows;
    }

    /** The record of unit {@code k}, checked against it: 1 if it became row {@code row}. */
    private int record(int k, int row) {
        long p = phys[k];
        if (p + size[k] > mapStart + map.limit()) {
            fetch(k);
        }
        byte[] b;
        int at = 0;
        if (map.hasArray()) {                   // a remote range: decoded where it lies
            b = map.array();
            at = map.arrayOffset() + (int) (p - mapStart);
        } else {
            if (buf.length < size[k]) {
                buf = new byte[Math.max(size[k], 2 * buf.length)];
            }
            b = buf;
            map.get((int) (p - mapStart), b, 0, size[k]);
        }
        int gotSize = be32(b, at + POS_TOTALSIZE);
        long gotPhys = be64(b, at + POS_PHYSICALOFFSET);
        if (gotSize != size[k] || gotPhys != p) {
            throw Corrupt.at(split.rel, p - split.base, "a consume-queue unit says a record of " + size[k]
                + " bytes starts here; the record there says offset " + gotPhys + ", " + gotSize + " bytes");
        }
        if (!inTime(b, at)) {
            return 0;
        }
        return columns.put(b, at, p - split.base, topics, vectors, row) ? 1 : 0;
    }

    /** Maps the bytes from the first unit's record to the last one's end (remote: the first range). */
    private void mapUnits() throws IOException {
        if (phys.length == 0) {
            return;
        }
        long end = phys[phys.length - 1] + size[phys.length - 1];
        long fileEnd = split.base + file.size();
        if (end > fileEnd) {
            throw Corrupt.at(split.rel, fileEnd - split.base, "file ends before the records its consume-queue "
                + "units point at");
        }
        if (file.mapped()) {
            mapStart = phys[0];
            map = file.bytes(mapStart - split.base, end - mapStart);
        } else {
            fetch(0);
        }
    }

    /** Remote: the records of units k.. that lie at most gapBytes apart, in one range read (the
     *  range after it read in the background meanwhile). */
    private void fetch(int k) {
        ByteBuffer got = null;
        if (ahead != null) {
            ByteBuffer next = await(ahead);
            ahead = null;
            if (aheadUnit == k) {
                got = next;
            }
        }
        int j = rangeEnd(k);
        map = got != null ? got : range(k, j);
        mapStart = phys[k];
        if (j < phys.length) {
            aheadUnit = j;
            ahead = CompletableFuture.supplyAsync(() -> range(j, rangeEnd(j)), AHEAD);
        }
    }

    /** The unit after the run of units from k whose records are at most gapBytes apart. */
    private int rangeEnd(int k) {
        long end = phys[k] + size[k];
        int j = k + 1;
        for (; j < phys.length && phys[j] - end <= gapBytes && phys[j] + size[j] - phys[k] <= RANGE; j++) {
            end = Math.max(end, phys[j] + size[j]);
        }
        return j;
    }

    private ByteBuffer range(int k, int j) {
        long end = 0;
        for (int u = k; u < j; u++) {
            end = Math.max(end, phys[u] + size[u]);
        }
        try {
            return file.bytes(phys[k] - split.base, end - phys[k]);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException("rocketmq source: cannot read " + split.rel, e);
        }
    }

    /** The units of the split's queues pointing into [start, stop) (and the offset bounds), merged
     *  into commitlog order. */
    private void units() throws IOException {
        long start = bounds.lo == null ? split.start : Math.max(split.start, bounds.lo);
        long stop = bounds.hi == null ? split.stop : Math.min(split.stop, bounds.hi + 1);
        List<long[]> ps = new ArrayList<>();
        List<int[]> ss = new ArrayList<>();
        int total = 0;
        for (List<Plan.QueueFile> queue : qs.queues) {
            Units u = new Units(queue, hadoop);
            try {
                int k0 = u.lowerBound(start);
                int k1 = u.lowerBound(stop);
                if (k1 > k0) {
                    u.read(k0, k1, start, stop);
                    ps.add(u.phys);
                    ss.add(u.size);
                    total += u.phys.length;
                }
            } finally {
                u.close();
            }
        }
        phys = new long[total];
        size = new int[total];
        merge(ps, ss);
        long segEnd = split.base + split.valid;
        for (int k = 0; k < total; k++) {
            if (size[k] < BLANK_SIZE || phys[k] + size[k] > segEnd) {
                throw Corrupt.at(split.rel, phys[k] - split.base, "a consume-queue unit of " + size[k]
                    + " bytes points past the segment's valid bytes");
            }
        }
    }

    /** k-way merge of the queues' units (each already in commitlog order). */
    private void merge(List<long[]> ps, List<int[]> ss) {
        int[] at = new int[ps.size()];
        for (int out = 0; out < phys.length; out++) {
            int best = -1;
            for (int q = 0; q < at.length; q++) {
                if (at[q] < ps.get(q).length && (best < 0 || ps.get(q)[at[q]] < ps.get(best)[at[best]])) {
                    best = q;
                }
            }
            phys[out] = ps.get(best)[at[best]];
            size[out] = ss.get(best)[at[best]];
            at[best]++;
        }
    }

    /** One queue's valid units (its files in order) as one sorted sequence, read on demand: the
     *  binary searches read the units by blocks of {@link #BLOCK} bytes, kept while the search runs. */
    private static final class Units {
        private static final int BLOCK = 64 << 10;
        private final List<Plan.QueueFile> files;
        private final long[] cum;
        private final FileBytes[] open;
        private final java.util.Map<String, String> hadoop;
        private final java.util.Map<Long, ByteBuffer> blocks = new java.util.HashMap<>();
        long[] phys;
        int[] size;

        Units(List<Plan.QueueFile> files, java.util.Map<String, String> hadoop) {
            this.files = files;
            this.hadoop = hadoop;
            cum = new long[files.size() + 1];
            for (int i = 0; i < files.size(); i++) {
                cum[i + 1] = cum[i] + files.get(i).units;
            }
            open = new FileBytes[files.size()];
        }

        private FileBytes file(int f) {
            if (open[f] == null) {
                Plan.QueueFile q = files.get(f);
                open[f] = FileBytes.open(q.file, q.rel, q.source, hadoop);
            }
            return open[f];
        }

        private int fileOf(long k) {
            int lo = 0;
            int hi = files.size() - 1;
            while (lo < hi) {
                int mid = (lo + hi + 1) >>> 1;
                if (cum[mid] <= k) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            return lo;
        }

        /** Bytes [pos, pos + len) of file f, checked to be there. */
        private ByteBuffer bytes(int f, long pos, long len) throws IOException {
            FileBytes fb = file(f);
            if (pos + len > fb.size()) {
                throw Corrupt.at(files.get(f).rel, fb.size(), "file ends before its valid units");
            }
            return fb.bytes(pos, len);
        }

        private long physAt(long k) throws IOException {
            int f = fileOf(k);
            long pos = (k - cum[f]) * CQ_UNIT_SIZE;
            long block = pos / BLOCK;
            ByteBuffer b = blocks.get(((long) f << 40) | block);
            if (b == null) {
                long valid = files.get(f).units * CQ_UNIT_SIZE;
                b = bytes(f, block * BLOCK, Math.min(BLOCK, valid - block * BLOCK));
                blocks.put(((long) f << 40) | block, b);
            }
            return b.getLong((int) (pos - block * BLOCK) + CQ_UNIT_PHYSICALOFFSET);
        }

        int lowerBound(long x) throws IOException {
            long lo = 0;
            long hi = cum[files.size()];
            while (lo < hi) {
                long mid = (lo + hi) >>> 1;
                if (physAt(mid) < x) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            return (int) lo;
        }

        /** Units [k0, k1) in use (size > 0) whose offsets fall in [start, stop). */
        void read(int k0, int k1, long start, long stop) throws IOException {
            long[] p = new long[k1 - k0];
            int[] s = new int[k1 - k0];
            int n = 0;
            for (int f = fileOf(k0); f < files.size() && cum[f] < k1; f++) {
                long a = Math.max(k0, cum[f]) - cum[f];
                long b = Math.min(k1, cum[f + 1]) - cum[f];
                ByteBuffer raw = bytes(f, a * CQ_UNIT_SIZE, (b - a) * CQ_UNIT_SIZE);
                for (int u = 0; u < b - a; u++) {
                    long ph = raw.getLong(u * CQ_UNIT_SIZE + CQ_UNIT_PHYSICALOFFSET);
                    int sz = raw.getInt(u * CQ_UNIT_SIZE + CQ_UNIT_TOTALSIZE);
                    if (sz > 0 && ph >= start && ph < stop) {
                        p[n] = ph;
                        s[n++] = sz;
                    }
                }
            }
            phys = java.util.Arrays.copyOf(p, n);
            size = java.util.Arrays.copyOf(s, n);
        }

        void close() throws IOException {
            blocks.clear();
            for (FileBytes c : open) {
                if (c != null) {
                    c.close();
                }
            }
        }
    }
}
