package org.rocketlake.spark;

import static org.rocketlake.spark.Layout.*;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;

import org.apache.spark.sql.types.StructType;

/**
 * Walks one split's records (the rule of storelib.compute.kernels' walk: stop at a BLANK record,
 * a TOTALSIZE <= 0, an unknown magic or a record running past the split) and decodes the ones
 * inside the bounds into column batches. The split is memory-mapped: the walk reads only the
 * record headers where they lie, and only a record inside the bounds is copied (once, into a
 * scratch buffer the columns are decoded from); reading the split into the heap instead cost two
 * copies of every byte (page cache to a direct buffer to the heap), the largest part of a scan.
 * On a remote file system the split is read in windows of {@code windowBytes} bytes, one range
 * read each, with {@code readAhead} more of them in flight (in the background, each on a stream of
 * its own) while one is decoded: a split narrowed to the zones of a time range fetches only those
 * zones' bytes. A record that runs past a window's end is joined to the next window in the room
 * left free before that window's bytes (no copy of the window), and records are decoded where
 * they lie in the window.
 */
final class SplitReader extends BatchReader {
    // default bytes per range read of a remote split: each GET costs milliseconds of JVM CPU in
    // the AWS SDK and S3A (docs/PERFORMANCE.md, "Reading a store on S3"), 2.2 s of a 2M full
    // scan's JVM CPU in 8 MiB windows, 1.55 s in 32 MiB ones; a task holds 1 + readAhead of them
    static final int WINDOW = 32 << 20;
    static final int READ_AHEAD = 1;       // default range reads in flight ahead of the one decoded
    private static final int HEAD = 512;   // a record's header fits (the checks before its size is trusted)
    private static final int ROOM = 64 << 10;   // bytes free before each remote window (a record's head)

    private ByteBuffer map;                 // the split's bytes from mapStart (mapped: all of them)
    private long mapStart;                  // commitlog offset of map's byte 0
    private final long mapEnd;              // commitlog offset just past the split's bytes, as far as the file goes
    private final int window;
    private final int readAhead;
    // remote: the range reads in flight, in order, and where the last of them ends
    private final java.util.ArrayDeque<Range> pending = new java.util.ArrayDeque<>();
    private long asked;
    private byte[] record = new byte[1 << 12];
    // remote: window arrays decoded and done with, read into again (a new array of a window's size
    // per range read is a G1 humongous allocation: most of a scan's collections, and their pauses)
    private final java.util.ArrayDeque<byte[]> spare = new java.util.ArrayDeque<>();
    private long pos;                       // commitlog offset of the next record
    private boolean done;

    private static final class Range {
        final long start;
        final CompletableFuture<ByteBuffer> got;

        Range(long start, CompletableFuture<ByteBuffer> got) {
            this.start = start;
            this.got = got;
        }
    }

    SplitReader(Plan.Split split, StructType required, Bounds bounds, int batchRows, java.util.Map<String, String> hadoop,
                int window, int readAhead) {
        super(split, required, bounds, batchRows, hadoop);
        this.pos = split.start;
        this.mapStart = split.start;
        this.window = Math.max(HEAD, window);
        this.readAhead = Math.max(0, readAhead);
        try {
            this.mapEnd = Math.max(split.start, Math.min(split.stop, split.base + file.size()));
            this.map = file.mapped() ? file.bytes(split.start - split.base, mapEnd - split.start)
                : window(split.start, HEAD, split.start);
        } catch (IOException e) {
            throw Corrupt.at(split.rel, split.start - split.base, "cannot be read (" + e + ")");
        }
    }

    /** The index in {@link #map} of commitlog offset {@code at}, with [at, at + n) in it as far as
     *  the split's bytes go (remote: moving the window there if it is not). */
    private int at(long at, int n) {
        long have = mapStart + map.limit();
        if (at + n > have && have < mapEnd) {
            ByteBuffer done = map;
            map = window(at, n, have);
            mapStart = at;
            spare(done);
        }
        return (int) (at - mapStart);
    }

    /** The remote bytes from {@code at} on, at least [at, at + n) (up to mapEnd): the rest of the
     *  window (which ends at {@code have}) and the next one, read in the background meanwhile;
     *  and the range reads after it asked for. */
    private ByteBuffer window(long at, int n, long have) {
        ByteBuffer got = null;
        Range next = pending.poll();
        if (next == null && readAhead == 0 && have < mapEnd && at >= mapStart && at <= have) {
            // no read ahead: the next window is read now, from where this one ends (its last
            // bytes, a record's head, are joined to it, not fetched again)
            int len = (int) Math.min(window, mapEnd - have);
            next = new Range(have, CompletableFuture.completedFuture(read(have, len)));
            asked = have + len;
        }
        if (next != null && next.start == have && at >= mapStart && at <= have) {
            ByteBuffer b = await(next.got);
            int carry = (int) (have - at);
            if (carry + b.limit() >= Math.min(n, mapEnd - at)) {
                got = carry == 0 ? b : joined(at, carry, b);
            }
        }
        if (got == null) {                  // not the next window (a record longer than it): start over here
            if (next != null) {
                pending.addFirst(next);
            }
            drain();
            // the windows after this one are asked for before this one is awaited: a split's
            // first requests are in flight together (its first window's wait is the query's
            // fixed cost; waiting for it before asking for the next put two round trips in series)
            int len = (int) Math.min(Math.max(n, window), mapEnd - at);
            CompletableFuture<ByteBuffer> first = readAhead > 0
                ? CompletableFuture.supplyAsync(() -> read(at, len), AHEAD) : null;
            asked = at + len;
            askAhead();
            got = first != null ? await(first) : read(at, len);
        }
        askAhead();
        return got;
    }

    /** Range reads in the background up to {@code readAhead} windows past {@code asked}. */
    private void askAhead() {
        while (pending.size() < readAhead && asked < mapEnd) {
            long from = asked;
            int len = (int) Math.min(window, mapEnd - from);
            pending.add(new Range(from, CompletableFuture.supplyAsync(() -> read(from, len), AHEAD)));
            asked = from + len;
        }
    }

    /** map's last {@code carry} bytes (from {@code at}) followed by window {@code b}. */
    private ByteBuffer joined(long at, int carry, ByteBuffer b) {
        int from = (int) (at - mapStart);
        if (b.hasArray() && b.arrayOffset() >= carry) {
            int off = b.arrayOffset() - carry;
            map.get(from, b.array(), off, carry);
            return ByteBuffer.wrap(b.array(), off, carry + b.limit()).slice();
        }
        ByteBuffer out = ByteBuffer.allocate(carry + b.limit());
        out.put(0, map, from, carry).put(carry, b, 0, b.limit());
        return out;
    }

    /** Waits for the range reads in flight and forgets them. */
    private void drain() {
        for (Range r : pending) {
            try {
                spare(r.got.get());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (java.util.concurrent.ExecutionException e) {
                // a range nobody reads has nothing to say
            }
        }
        pending.clear();
    }

    /** A window's array, done with (one of a window's size: a longer record's is left to the GC). */
    private void spare(ByteBuffer done) {
        if (done.hasArray() && done.array().length == ROOM + window) {
            synchronized (spare) {
                spare.push(done.array());
            }
        }
    }

    private ByteBuffer read(long at, int n) {
        int len = (int) Math.min(n, mapEnd - at);
        byte[] into = null;
        if (len <= window) {
            synchronized (spare) {
                into = spare.poll();
            }
            if (into == null && len == window) {
                into = new byte[ROOM + window];
            }
        }
        try {
            return file.bytes(at - split.base, len, ROOM, into);
        } catch (IOException e) {
            throw new UncheckedIOException("rocketmq source: cannot read " + split.rel + " at " + (at - split.base), e);
        }
    }

    @Override
    public void close() throws IOException {
        drain();
        super.close();
    }

    @Override
    int fill() {
        int rows = 0;
        while (rows < batchRows && !done) {
            rows += step(rows);
        }
        return rows;
    }

    /** Reads the record at {@code pos}: 1 if it became row {@code row}, else 0. */
    private int step(int row) {
        long stop = split.stop;
        if (stop - pos < BLANK_SIZE || pos + BLANK_SIZE > mapEnd) {
            return finish(false);
        }
        int at = at(pos, HEAD);
        int size = map.getInt(at + POS_TOTALSIZE);
        int magic = map.getInt(at + POS_MAGIC);
        if (pos == split.start) {
            startsRecord(at, size, magic);
        }
        if (magic == BLANK_MAGIC || size <= 0 || (magic != MAGIC_V1 && magic != MAGIC_V2) || pos + size > stop) {
            return finish(magic == BLANK_MAGIC);
        }
        if (pos + size > mapEnd) {
            throw Corrupt.at(split.rel, pos - split.base, "file ends inside a record of " + size + " bytes");
        }
        at = at(pos, size);
        long recordAt = pos;
        pos += size;
        if ((bounds.lo != null && recordAt < bounds.lo) || (bounds.hi != null && recordAt > bounds.hi)) {
            return 0;
        }
        if (bounds.beginTs != null || bounds.endTs != null) {
            int bh = (map.getInt(at + POS_SYSFLAG) & FLAG_BORNHOST_V6) != 0 ? HOST_V6_SIZE : HOST_V4_SIZE;
            if (at + POS_BORNHOST + bh + REL_STORETIMESTAMP + SIZE_STORETIMESTAMP > map.limit()) {
                throw Corrupt.at(split.rel, recordAt - split.base, "damaged record (TOTALSIZE " + size + ")");
            }
            long ts = map.getLong(at + POS_BORNHOST + bh + REL_STORETIMESTAMP);
            if ((bounds.beginTs != null && ts < bounds.beginTs) || (bounds.endTs != null && ts > bounds.endTs)) {
                return 0;
            }
        }
        if (map.hasArray()) {               // a remote window: decoded where it lies
            return columns.put(map.array(), map.arrayOffset() + at, recordAt - split.base, topics, bounds.floors, vectors, row) ? 1 : 0;
        }
        if (record.length < size) {
            record = new byte[Math.max(size, 2 * record.length)];
        }
        map.get(at, record, 0, size);
        return columns.put(record, 0, recordAt - split.base, topics, bounds.floors, vectors, row) ? 1 : 0;
    }

    /** A split starts on a record (the plan's boundaries come from consume-queue units or zone
     *  maps, both checked here): a split of nothing there would read as no rows. */
    private void startsRecord(int at, int size, int magic) {
        boolean ok = (magic == MAGIC_V1 || magic == MAGIC_V2) && size > 0
            && at + POS_PHYSICALOFFSET + SIZE_PHYSICALOFFSET <= map.limit()
            && map.getLong(at + POS_PHYSICALOFFSET) == pos;
        if (!ok) {
            throw Corrupt.at(split.rel, pos - split.base, "no record starts here (size " + size + ", magic "
                + Integer.toHexString(magic) + "), where the plan starts a split");
        }
    }

    /** The walk ends: exactly at stop, or for the segment's last split at a BLANK record (a full
     *  segment's end). The valid bytes were read as records by whatever set them (the manifest, a
     *  broker's recovery), so records that end before them are damage, not a shorter answer. */
    private int finish(boolean blank) {
        done = true;
        if (!split.last() && pos != split.stop) {
            throw Corrupt.at(split.rel, pos - split.base, "the records do not end at " + split.stop
                + ", where a consume-queue unit says the next record starts");
        }
        if (split.last() && !blank && pos < split.base + split.valid) {
            throw Corrupt.at(split.rel, pos - split.base, "the records end here, before the segment's " + split.valid
                + " valid bytes (a zero size, an unknown magic or a record running past them)");
        }
        return 0;
    }

}
