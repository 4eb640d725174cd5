package org.rocketlake.spark;

import static org.rocketlake.spark.Layout.*;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Walks one split's records (the rule of storelib.compute.kernels' walk: stop at a BLANK record,
 * a TOTALSIZE <= 0, an unknown magic or a record running past the split) and decodes the ones
 * inside the bounds into column batches. The split is read in large chunks into one heap buffer
 * (a record is always whole in it), never a call per record.
 */
final class SplitReader implements PartitionReader<ColumnarBatch> {
    private static final int CHUNK = 8 << 20;

    private final Plan.Split split;
    private final Bounds bounds;
    private final byte[][] topics;
    private final int batchRows;
    private final RecordColumns columns;
    private final OnHeapColumnVector[] vectors;
    private final ColumnarBatch batch;
    private final FileChannel channel;

    private byte[] buf = new byte[0];
    private long bufStart;          // commitlog offset of buf[0]
    private int bufLen;
    private long pos;               // commitlog offset of the next record
    private boolean done;

    SplitReader(Plan.Split split, StructType required, Bounds bounds, int batchRows) {
        this.split = split;
        this.bounds = bounds;
        this.topics = bounds.topicBytes();
        this.batchRows = batchRows;
        this.columns = new RecordColumns(required, split.rel, split.base);
        this.vectors = OnHeapColumnVector.allocateColumns(batchRows, required);
        this.batch = new ColumnarBatch(vectors);
        this.pos = split.start;
        try {
            this.channel = FileChannel.open(Paths.get(split.file), StandardOpenOption.READ);
        } catch (NoSuchFileException e) {
            throw Corrupt.at(split.rel, 0, "missing file");
        } catch (IOException e) {
            throw new UncheckedIOException("rocketmq source: cannot open " + split.file, e);
        }
    }

    @Override
    public boolean next() throws IOException {
        if (done) {
            return false;
        }
        for (OnHeapColumnVector v : vectors) {
            v.reset();
        }
        int rows = 0;
        while (rows < batchRows && !done) {
            rows += step(rows);
        }
        batch.setNumRows(rows);
        return rows > 0;
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
        if ((bounds.lo != null && recordAt < bounds.lo) || (bounds.hi != null && recordAt > bounds.hi)) {
            return 0;
        }
        if (bounds.beginTs != null || bounds.endTs != null) {
            int sysFlag = be32(buf, at + POS_SYSFLAG);
            int bh = (sysFlag & FLAG_BORNHOST_V6) != 0 ? HOST_V6_SIZE : HOST_V4_SIZE;
            long ts = be64(buf, at + POS_BORNHOST + bh + REL_STORETIMESTAMP);
            if ((bounds.beginTs != null && ts < bounds.beginTs) || (bounds.endTs != null && ts > bounds.endTs)) {
                return 0;
            }
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
            int r = channel.read(bb, filePos + bb.position());
            if (r < 0) {
                break;
            }
        }
        bufStart = at;
        bufLen = bb.position();
        return n <= bufLen;
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() throws IOException {
        channel.close();
        batch.close();
    }

    static int be32(byte[] b, int i) {
        return (b[i] << 24) | ((b[i + 1] & 0xff) << 16) | ((b[i + 2] & 0xff) << 8) | (b[i + 3] & 0xff);
    }

    static long be64(byte[] b, int i) {
        return ((long) be32(b, i) << 32) | (be32(b, i + 4) & 0xffffffffL);
    }
}
