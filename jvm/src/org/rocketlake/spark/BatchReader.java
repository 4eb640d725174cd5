package org.rocketlake.spark;

import static org.rocketlake.spark.Layout.*;

import java.io.IOException;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * What the two split readers share: the segment file, the bounds, the requested columns and the
 * batch they fill ({@link SplitReader} walks a split, {@link QueueReader} reads it through
 * consume-queue units). {@link #fill} adds rows to the reset batch until it is full or the split
 * is done. The segment is a {@link FileBytes}: local (mapped) or on a Hadoop file system.
 */
abstract class BatchReader implements PartitionReader<ColumnarBatch> {
    final Plan.Split split;
    final Bounds bounds;
    final byte[][] topics;
    final int batchRows;
    final RecordColumns columns;
    final OnHeapColumnVector[] vectors;
    final ColumnarBatch batch;
    final FileBytes file;
    // remote: the next range of the file, read in the background while this one is decoded
    java.util.concurrent.CompletableFuture<java.nio.ByteBuffer> ahead;
    final java.util.Map<String, String> hadoop;    // null: a local store

    BatchReader(Plan.Split split, StructType required, Bounds bounds, int batchRows, java.util.Map<String, String> hadoop) {
        this.split = split;
        this.bounds = bounds;
        this.topics = bounds.topicBytes();
        this.batchRows = batchRows;
        this.columns = new RecordColumns(required, split.rel, split.base);
        this.vectors = OnHeapColumnVector.allocateColumns(batchRows, required);
        this.batch = new ColumnarBatch(vectors);
        this.hadoop = hadoop;
        this.file = FileBytes.open(split.file, split.rel, split.source, hadoop);
    }

    /** Rows added to the batch (from row 0); 0 only when the split has no more. */
    abstract int fill() throws IOException;

    @Override
    public boolean next() throws IOException {
        for (OnHeapColumnVector v : vectors) {
            v.reset();
        }
        int rows = fill();
        batch.setNumRows(rows);
        return rows > 0;
    }

    /** Whether the record at {@code at} of {@code buf} has a store time inside the bounds. */
    final boolean inTime(byte[] buf, int at) {
        if (bounds.beginTs == null && bounds.endTs == null) {
            return true;
        }
        int sysFlag = be32(buf, at + POS_SYSFLAG);
        int bh = (sysFlag & FLAG_BORNHOST_V6) != 0 ? HOST_V6_SIZE : HOST_V4_SIZE;
        long ts = be64(buf, at + POS_BORNHOST + bh + REL_STORETIMESTAMP);
        return !((bounds.beginTs != null && ts < bounds.beginTs) || (bounds.endTs != null && ts > bounds.endTs));
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    // Threads of the background reads (not the common pool: on two cores it has one thread, and
    // each task's read ahead would wait for the other's).
    static final java.util.concurrent.ExecutorService AHEAD = java.util.concurrent.Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "rocketmq-read-ahead");
        t.setDaemon(true);
        return t;
    });

    /** The bytes a background read got (its error, as thrown by the read). */
    static java.nio.ByteBuffer await(java.util.concurrent.CompletableFuture<java.nio.ByteBuffer> f) {
        try {
            return f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted reading a split", e);
        } catch (java.util.concurrent.ExecutionException e) {
            throw e.getCause() instanceof RuntimeException ? (RuntimeException) e.getCause()
                : new IllegalStateException(e.getCause());
        }
    }

    @Override
    public void close() throws IOException {
        if (ahead != null) {
            try {
                ahead.get();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (java.util.concurrent.ExecutionException e) {
                // the split is done or failed already: a range nobody reads has nothing to say
            }
            ahead = null;
        }
        file.close();
        batch.close();
    }

    static int be32(byte[] b, int i) {
        return (b[i] << 24) | ((b[i + 1] & 0xff) << 16) | ((b[i + 2] & 0xff) << 8) | (b[i + 3] & 0xff);
    }

    static long be64(byte[] b, int i) {
        return ((long) be32(b, i) << 32) | (be32(b, i + 4) & 0xffffffffL);
    }
}
