package org.rocketlake.spark;

import static org.rocketlake.spark.Layout.*;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A topic filter's split, read through the topics' consume queues (storelib.read.splits' queue
 * splits): the units pointing into [start, stop) say where the topic's records are, so only their
 * bytes are read, in ranges coalesced across small gaps. Every record is checked against its unit
 * (PHYSICALOFFSET and TOTALSIZE) and its topic; rows come in commitlog order, as a walk gives them.
 * Planned only for snapshots where every live record has exactly one live unit. When the ranges
 * to read would cover most of the split anyway (a topic spread evenly over the commitlog), the
 * split is walked instead: one sequential pass costs less than reading nearly every byte in pieces.
 */
final class QueueReader extends BatchReader {
    private static final int MAX_RANGE = 32 << 20;    // bytes of one read at most

    private final Plan.QueueSplit qs;
    private final StructType required;
    private SplitReader walk;         // the split walked instead (see the class comment)

    private long[] phys;
    private int[] size;
    private int next;                 // the next unit to read
    private byte[] buf = new byte[0];
    private long bufStart;
    private int bufLen;

    QueueReader(Plan.QueueSplit qs, StructType required, Bounds bounds, int batchRows) {
        super(qs.split, required, bounds, batchRows);
        this.qs = qs;
        this.required = required;
    }

    @Override
    public boolean next() throws IOException {
        if (phys == null) {
            units();
            if (coalescedBytes() * 2 > split.stop - split.start) {
                walk = new SplitReader(split, required, bounds, batchRows);
            }
        }
        return walk != null ? walk.next() : super.next();
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
    private int record(int k, int row) throws IOException {
        long p = phys[k];
        if (p < bufStart || p + size[k] > bufStart + bufLen) {
            fill(k);
        }
        int at = (int) (p - bufStart);
        int gotSize = be32(buf, at + POS_TOTALSIZE);
        long gotPhys = be64(buf, at + POS_PHYSICALOFFSET);
        if (gotSize != size[k] || gotPhys != p) {
            throw Corrupt.at(split.rel, p - split.base, "a consume-queue unit says a record of " + size[k]
                + " bytes starts here; the record there says offset " + gotPhys + ", " + gotSize + " bytes");
        }
        if (!inTime(buf, at)) {
            return 0;
        }
        return columns.put(buf, at, p - split.base, topics, vectors, row) ? 1 : 0;
    }

    /** The end of the coalesced range that starts with unit {@code k}. */
    private long rangeEnd(int k) {
        long r1 = phys[k] + size[k];
        for (int j = k + 1; j < phys.length && phys[j] - r1 <= qs.coalesceBytes && phys[j] + size[j] - phys[k] <= MAX_RANGE; j++) {
            r1 = phys[j] + size[j];
        }
        return r1;
    }

    private long coalescedBytes() {
        long total = 0;
        for (int k = 0; k < phys.length; ) {
            long end = rangeEnd(k);
            total += end - phys[k];
            while (k < phys.length && phys[k] < end) {
                k++;
            }
        }
        return total;
    }

    /** Reads the coalesced range of records from unit {@code k} on into {@code buf}. */
    private void fill(int k) throws IOException {
        long r0 = phys[k];
        int n = (int) (rangeEnd(k) - r0);
        if (buf.length < n) {
            buf = new byte[Math.max(n, 1 << 20)];
        }
        ByteBuffer bb = ByteBuffer.wrap(buf, 0, n);
        while (bb.hasRemaining()) {
            if (channel.read(bb, r0 - split.base + bb.position()) < 0) {
                throw Corrupt.at(split.rel, r0 - split.base + bb.position(), "file ends before the records its "
                    + "consume-queue units point at");
            }
        }
        bufStart = r0;
        bufLen = n;
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
            Units u = new Units(queue, split.rel);
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

    @Override
    public ColumnarBatch get() {
        return walk != null ? walk.get() : batch;
    }

    @Override
    public void close() throws IOException {
        super.close();
        if (walk != null) {
            walk.close();
        }
    }

    /** One queue's valid units (its files in order) as one sorted sequence, read on demand. */
    private static final class Units {
        private final List<Plan.QueueFile> files;
        private final long[] cum;
        private final FileChannel[] open;
        private final String rel;
        private final ByteBuffer one = ByteBuffer.allocate(8);
        long[] phys;
        int[] size;

        Units(List<Plan.QueueFile> files, String rel) {
            this.files = files;
            this.rel = rel;
            cum = new long[files.size() + 1];
            for (int i = 0; i < files.size(); i++) {
                cum[i + 1] = cum[i] + files.get(i).units;
            }
            open = new FileChannel[files.size()];
        }

        private FileChannel channel(int f) {
            if (open[f] == null) {
                open[f] = BatchReader.open(files.get(f).file, files.get(f).rel);
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

        private long physAt(long k) throws IOException {
            int f = fileOf(k);
            one.clear();
            long pos = (k - cum[f]) * CQ_UNIT_SIZE + CQ_UNIT_PHYSICALOFFSET;
            while (one.hasRemaining()) {
                if (channel(f).read(one, pos + one.position()) < 0) {
                    throw Corrupt.at(files.get(f).rel, pos, "file ends before its valid units");
                }
            }
            return one.getLong(0);
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
                ByteBuffer raw = ByteBuffer.allocate((int) ((b - a) * CQ_UNIT_SIZE));
                while (raw.hasRemaining()) {
                    if (channel(f).read(raw, a * CQ_UNIT_SIZE + raw.position()) < 0) {
                        throw Corrupt.at(files.get(f).rel, a * CQ_UNIT_SIZE + raw.position(),
                            "file ends before its valid units");
                    }
                }
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
            for (FileChannel c : open) {
                if (c != null) {
                    c.close();
                }
            }
        }
    }
}
