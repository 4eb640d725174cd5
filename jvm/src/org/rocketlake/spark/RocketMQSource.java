package org.rocketlake.spark;

import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The JVM half of the {@code rocketmq} Spark source: reads the commitlog splits that the Python
 * planner (storelib.read.jvmsource) chose for one snapshot of a store, as column batches.
 *
 * Why a JVM reader beside the Python data source: a Python source hands Spark every column of
 * every row through Arrow, and Spark offers it no column pruning; a query that touches two of the
 * twenty message columns then pays for all twenty. Here Spark asks only for the columns a query
 * needs and gets them straight from the record bytes, without a Python worker.
 *
 * Options (set by the planner, not by users): {@code plan} (JSON: the splits, the option bounds),
 * {@code schema} (the message columns' DDL, defined once in storelib.format.records).
 */
public final class RocketMQSource implements TableProvider {

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return schemaOf(options);
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new MessageTable(schema, Plan.parse(required(properties, "plan")));
    }

    static StructType schemaOf(Map<String, String> options) {
        return StructType.fromDDL(required(options, "schema"));
    }

    private static String required(Map<String, String> options, String name) {
        String v = options.get(name);
        if (v == null) {
            throw new IllegalArgumentException("org.rocketlake.spark.RocketMQSource is loaded by "
                + "spark.read.format(\"rocketmq\") after storelib's register(spark); option '" + name + "' is missing");
        }
        return v;
    }

    static final class MessageTable implements Table, SupportsRead {
        private final StructType schema;
        private final Plan plan;

        MessageTable(StructType schema, Plan plan) {
            this.schema = schema;
            this.plan = plan;
        }

        @Override
        public String name() {
            return "rocketmq(" + plan.store + ")";
        }

        @Override
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return Set.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new MessageScan.Builder(schema, plan);
        }
    }
}
