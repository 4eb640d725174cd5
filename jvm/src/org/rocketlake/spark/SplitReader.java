package org.rocketlake.spark;

import static org.rocketlake.spark.Layout.*;

import java.io.IOException;
import java.nio.ByteBuffer;

import org.apache.spark.sql.types.StructType;

/**
 * Walks one split's records (the rule of storelib.compute.kernels' walk: stop at a BLANK record,
 * a TOTALSIZE <= 0, an unknown magic or a record running past the split) and decodes the ones
 * inside the bounds into column batches. The split is read in large chunks into one heap buffer
 * (a record is always whole in it), never a call per record.
 */
final class SplitReader extends BatchReader {
    private static final int CHUNK = 8 << 20;

    private byte[] buf = new byte[0];
    private long bufStart;          // commitlog offset of buf[0]
    private int bufLen;
    private long pos;               // commitlog offset of the next record
    private boolean done;

    SplitReader(Plan.Split split, StructType required, Bounds bounds, int batchRows) {
        super(split, required, bounds, batchRows);
        this.pos = split.start;
    }

    @Override
    int fill() throws IOException {
        int rows = 0;
        while (rows < batchRows && !done) {
            rows += step(rows);
        }
        return rows;
    }

    /** Reads the record at {@code pos}: 1 if it became row {@code row}, else 0. */
    private int step(int row) throws IOException {
        long stop = split.stop;
        if (stop - pos < BLANK_SIZE || !have(pos, BLANK_SIZE)) {
            return finish();
        }
        int at = (int) (pos - bufStart);
        int size = be32(buf, at + POS_TOTALSIZE);
        int magic = be32(buf, at + POS_MAGIC);
        if (magic == BLANK_MAGIC || size <= 0 || (magic != MAGIC_V1 && magic != MAGIC_V2) || pos + size > stop) {
            return finish();
        }
        if (!have(pos, size)) {
            throw Corrupt.at(split.rel, pos - split.base, "file ends inside a record of " + size + " bytes");
        }
        at = (int) (pos - bufStart);
        long recordAt = pos;
        pos += size;
        if ((bounds.lo != null && recordAt < bounds.lo) || (bounds.hi != null && recordAt > bounds.hi)
            || !inTime(buf, at)) {
            return 0;
        }
        return columns.put(buf, at, recordAt - split.base, topics, vectors, row) ? 1 : 0;
    }

    private int finish() {
        done = true;
        if (!split.last() && pos != split.stop) {
            throw Corrupt.at(split.rel, pos - split.base, "the records do not end at " + split.stop
                + ", where a consume-queue unit says the next record starts");
        }
        return 0;
    }

    /** Whether [at, at + n) of the segment is in {@code buf} (refilling it from {@code at}); false
     *  only when the file ends first. */
    private boolean have(long at, int n) throws IOException {
        if (at >= bufStart && at + n <= bufStart + bufLen) {
            return true;
        }
        long fileEnd = split.base + split.valid;
        int want = (int) Math.min(Math.max((long) CHUNK, n), Math.max(n, fileEnd - at));
        if (buf.length < want) {
            buf = new byte[want];
        }
        ByteBuffer bb = ByteBuffer.wrap(buf, 0, want);
        long filePos = at - split.base;
        while (bb.hasRemaining()) {
            if (channel.read(bb, filePos + bb.position()) < 0) {
                break;
            }
        }
        bufStart = at;
        bufLen = bb.position();
        return n <= bufLen;
    }
}
