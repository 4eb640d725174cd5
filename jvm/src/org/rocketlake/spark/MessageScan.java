package org.rocketlake.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A scan of the planned splits: only the columns the query names, the pushable filters (topic =
 * and IN; =, <, <=, >, >= on store_timestamp and commitlog_offset; IS NOT NULL of a column every
 * record has) applied by the reader, splits outside them left out.
 */
final class MessageScan implements Scan, Batch {
    // Columns a record always has a value for (the others: tags, keys, uniq_key may be absent).
    private static final Set<String> NEVER_NULL = Set.of("commitlog_offset", "store_size", "msg_id", "topic",
        "queue_id", "queue_offset", "flag", "sys_flag", "body_crc", "born_timestamp", "born_host", "store_timestamp",
        "store_host", "reconsume_times", "prepared_transaction_offset", "body", "properties");

    private final StructType required;
    private final Plan plan;
    private final Bounds bounds;

    private MessageScan(StructType required, Plan plan, Bounds bounds) {
        this.required = required;
        this.plan = plan;
        this.bounds = bounds;
    }

    static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters {
        private StructType required;
        private final Plan plan;
        private final Bounds bounds;
        private Filter[] pushed = new Filter[0];

        Builder(StructType schema, Plan plan) {
            this.required = schema;
            this.plan = plan;
            this.bounds = plan.bounds.copy();
        }

        @Override
        public void pruneColumns(StructType requiredSchema) {
            required = requiredSchema;
        }

        @Override
        public Filter[] pushFilters(Filter[] filters) {
            List<Filter> rest = new ArrayList<>();
            List<Filter> taken = new ArrayList<>();
            for (Filter f : filters) {
                if (exact(f)) {
                    apply(f, bounds);
                    taken.add(f);
                } else {
                    rest.add(f);
                }
            }
            pushed = taken.toArray(new Filter[0]);
            return rest.toArray(new Filter[0]);
        }

        @Override
        public Filter[] pushedFilters() {
            return pushed;
        }

        @Override
        public Scan build() {
            return new MessageScan(required, plan, bounds);
        }
    }

    /** Whether the reader applies {@code f} exactly. */
    static boolean exact(Filter f) {
        if (f instanceof And) {
            return exact(((And) f).left()) && exact(((And) f).right());
        }
        if (f instanceof IsNotNull) {
            return NEVER_NULL.contains(((IsNotNull) f).attribute());
        }
        if (f instanceof EqualTo && "topic".equals(((EqualTo) f).attribute())) {
            return ((EqualTo) f).value() instanceof String;
        }
        if (f instanceof In && "topic".equals(((In) f).attribute())) {
            return Arrays.stream(((In) f).values()).allMatch(v -> v instanceof String);
        }
        String col = comparedColumn(f);
        return col != null && isWhole(comparedValue(f));
    }

    private static boolean isWhole(Object v) {
        return v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte;
    }

    private static String comparedColumn(Filter f) {
        String a = f instanceof EqualTo ? ((EqualTo) f).attribute()
            : f instanceof GreaterThan ? ((GreaterThan) f).attribute()
            : f instanceof GreaterThanOrEqual ? ((GreaterThanOrEqual) f).attribute()
            : f instanceof LessThan ? ((LessThan) f).attribute()
            : f instanceof LessThanOrEqual ? ((LessThanOrEqual) f).attribute() : null;
        return "store_timestamp".equals(a) || "commitlog_offset".equals(a) ? a : null;
    }

    private static Object comparedValue(Filter f) {
        return f instanceof EqualTo ? ((EqualTo) f).value()
            : f instanceof GreaterThan ? ((GreaterThan) f).value()
            : f instanceof GreaterThanOrEqual ? ((GreaterThanOrEqual) f).value()
            : f instanceof LessThan ? ((LessThan) f).value()
            : ((LessThanOrEqual) f).value();
    }

    private static void apply(Filter f, Bounds b) {
        if (f instanceof And) {
            apply(((And) f).left(), b);
            apply(((And) f).right(), b);
            return;
        }
        if (f instanceof IsNotNull) {
            return;
        }
        if (f instanceof EqualTo && "topic".equals(((EqualTo) f).attribute())) {
            b.topicIn(List.of((String) ((EqualTo) f).value()));
            return;
        }
        if (f instanceof In) {
            List<String> vals = new ArrayList<>();
            for (Object v : ((In) f).values()) {
                vals.add((String) v);
            }
            b.topicIn(vals);
            return;
        }
        boolean time = "store_timestamp".equals(comparedColumn(f));
        long v = ((Number) comparedValue(f)).longValue();
        Long lower = f instanceof EqualTo || f instanceof GreaterThanOrEqual ? Long.valueOf(v)
            : f instanceof GreaterThan ? Long.valueOf(v == Long.MAX_VALUE ? v : v + 1) : null;
        Long upper = f instanceof EqualTo || f instanceof LessThanOrEqual ? Long.valueOf(v)
            : f instanceof LessThan ? Long.valueOf(v == Long.MIN_VALUE ? v : v - 1) : null;
        if (f instanceof GreaterThan && v == Long.MAX_VALUE) {
            b.topicIn(List.of());                  // nothing is greater
        }
        if (f instanceof LessThan && v == Long.MIN_VALUE) {
            b.topicIn(List.of());
        }
        if (time) {
            b.lowerTime(lower);
            b.upperTime(upper);
        } else {
            b.lowerOffset(lower);
            b.upperOffset(upper);
        }
    }

    @Override
    public StructType readSchema() {
        return required;
    }

    @Override
    public String description() {
        String via = bounds.topics != null && plan.queues != null ? "; topics read through their consume queues" : "";
        return "rocketmq " + plan.store + " [" + plan.splits.size() + " splits; " + bounds + via + "]";
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        List<Plan.Split> splits = new ArrayList<>();
        for (Plan.Split whole : plan.splits) {
            for (Plan.Split s : whole.narrow(bounds.beginTs, bounds.endTs)) {
                if (bounds.mayHold(s)) {
                    splits.add(s);
                }
            }
        }
        // (not a topic read through the queues: each task searches the queues' units for its bounds)
        if (bounds.topics == null || plan.queues == null) {
            long tasks = plan.remote && plan.tasksPerCore > 0 ? (long) plan.tasksPerCore
                * org.apache.spark.sql.SparkSession.active().sparkContext().defaultParallelism() : 0;
            // minPartitions, as the Python reader takes it: no fewer tasks than that where the
            // splits' zones allow (a split is cut on its zone starts only)
            if (tasks > 0 || splits.size() < plan.minPartitions) {
                splits = Plan.Split.even(splits, Math.max(tasks, plan.minPartitions));
            }
        }
        List<InputPartition> out = new ArrayList<>();
        for (Plan.Split s : splits) {
            Plan.QueueSplit q = plan.queueSplit(s, bounds.topics);
            if (q == null) {
                out.add(s);
            } else if (!q.queues.isEmpty()) {
                out.add(q);
            }
        }
        return out.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new Factory(required, bounds, plan, plan.remote ? hadoopSettings() : null);
    }

    // The Hadoop settings a remote file system is opened with on every executor: the session's
    // (its spark.hadoop.* options, and the per-bucket S3A settings storelib.read.jvmsource sets
    // from the store's object-store settings) under these prefixes.
    private static final String[] HADOOP_PREFIXES = {"fs.", "dfs.", "hadoop.", "ipc.", "io."};

    private static java.util.Map<String, String> hadoopSettings() {
        org.apache.hadoop.conf.Configuration conf =
            org.apache.spark.sql.SparkSession.active().sessionState().newHadoopConf();
        java.util.Map<String, String> out = new java.util.TreeMap<>();
        for (java.util.Map.Entry<String, String> e : conf) {
            for (String p : HADOOP_PREFIXES) {
                if (e.getKey().startsWith(p)) {
                    out.put(e.getKey(), e.getValue());
                    break;
                }
            }
        }
        return out;
    }

    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final StructType required;
        private final Bounds bounds;
        private final int batchRows;
        private final java.util.Map<String, String> hadoop;    // null: a local store
        private final long gapBytes;
        private final int windowBytes;
        private final int readAhead;
        private final String store;
        private final String batch;

        Factory(StructType required, Bounds bounds, Plan plan, java.util.Map<String, String> hadoop) {
            this.required = required;
            this.bounds = bounds;
            this.batchRows = plan.batchRows;
            this.hadoop = hadoop;
            this.gapBytes = plan.gapBytes;
            this.windowBytes = plan.windowBytes;
            this.readAhead = plan.readAhead;
            this.store = plan.store;
            this.batch = plan.batch;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            try {
                if (partition instanceof Plan.QueueSplit) {
                    return new Named(new QueueReader((Plan.QueueSplit) partition, required, bounds, batchRows, hadoop,
                        gapBytes, windowBytes, readAhead), store, batch);
                }
                return new Named(new SplitReader((Plan.Split) partition, required, bounds, batchRows, hadoop,
                    windowBytes, readAhead), store, batch);
            } catch (RuntimeException e) {
                throw Corrupt.named(e, store, batch);
            }
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("the rocketmq source reads column batches");
        }
    }

    /** A split's reader whose missing file's error names the store and the plan's batch ({@link Corrupt#named}). */
    static final class Named implements PartitionReader<ColumnarBatch> {
        private final PartitionReader<ColumnarBatch> reader;
        private final String store;
        private final String batch;

        Named(PartitionReader<ColumnarBatch> reader, String store, String batch) {
            this.reader = reader;
            this.store = store;
            this.batch = batch;
        }

        @Override
        public boolean next() throws java.io.IOException {
            try {
                return reader.next();
            } catch (RuntimeException e) {
                throw Corrupt.named(e, store, batch);
            }
        }

        @Override
        public ColumnarBatch get() {
            return reader.get();
        }

        @Override
        public void close() throws java.io.IOException {
            reader.close();
        }
    }
}
