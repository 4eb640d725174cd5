package org.rocketlake.spark;

import static org.rocketlake.spark.Layout.*;

import java.io.IOException;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;

import org.apache.spark.sql.types.StructType;

/**
 * Walks one split's records (the rule of storelib.compute.kernels' walk: stop at a BLANK record,
 * a TOTALSIZE <= 0, an unknown magic or a record running past the split) and decodes the ones
 * inside the bounds into column batches. The split is memory-mapped: the walk reads only the
 * record headers where they lie, and only a record inside the bounds is copied (once, into a
 * scratch buffer the columns are decoded from); reading the split into the heap instead cost two
 * copies of every byte (page cache to a direct buffer to the heap), the largest part of a scan.
 */
final class SplitReader extends BatchReader {
    private final MappedByteBuffer map;   // the split's bytes: [start, stop), as far as the file goes
    private final long mapEnd;              // commitlog offset just past the mapped bytes
    private byte[] record = new byte[1 << 12];
    private long pos;                       // commitlog offset of the next record
    private boolean done;

    SplitReader(Plan.Split split, StructType required, Bounds bounds, int batchRows) {
        super(split, required, bounds, batchRows);
        this.pos = split.start;
        long fileSize;
        try {
            fileSize = channel.size();
            this.mapEnd = Math.max(split.start, Math.min(split.stop, split.base + fileSize));
            this.map = channel.map(FileChannel.MapMode.READ_ONLY, split.start - split.base, mapEnd - split.start);
        } catch (IOException e) {
            throw Corrupt.at(split.rel, split.start - split.base, "cannot be read (" + e + ")");
        }
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
            return finish();
        }
        int at = (int) (pos - split.start);
        int size = map.getInt(at + POS_TOTALSIZE);
        int magic = map.getInt(at + POS_MAGIC);
        if (pos == split.start) {
            startsRecord(at, size, magic);
        }
        if (magic == BLANK_MAGIC || size <= 0 || (magic != MAGIC_V1 && magic != MAGIC_V2) || pos + size > stop) {
            return finish();
        }
        if (pos + size > mapEnd) {
            throw Corrupt.at(split.rel, pos - split.base, "file ends inside a record of " + size + " bytes");
        }
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
        if (record.length < size) {
            record = new byte[Math.max(size, 2 * record.length)];
        }
        map.get(at, record, 0, size);
        return columns.put(record, 0, recordAt - split.base, topics, vectors, row) ? 1 : 0;
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

    private int finish() {
        done = true;
        if (!split.last() && pos != split.stop) {
            throw Corrupt.at(split.rel, pos - split.base, "the records do not end at " + split.stop
                + ", where a consume-queue unit says the next record starts");
        }
        return 0;
    }

}
