// Hadoop's HDFS mini cluster for the hdfs:// tests (tests/support/hdfscluster.py): one NameNode and
// three DataNodes in this JVM, every port ephemeral on 127.0.0.1, data under the directory given.
// Further arguments key=value are Hadoop settings. Prints "ready hdfs://127.0.0.1:<port>" once the cluster is up, and stops it when standard input
// closes (the test process died or is done with it).
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public class HdfsMini {
    public static void main(String[] args) throws Exception {
        Configuration conf = new Configuration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, args[0]);
        conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
        conf.set("dfs.namenode.http-address", "127.0.0.1:0");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.setBoolean("dfs.permissions.enabled", false);
        // small blocks: a store file spans several blocks and DataNode pipelines, as on a real cluster
        conf.setLong("dfs.blocksize", 1L << 20);
        conf.setLong("dfs.namenode.fs-limits.min-block-size", 1L << 16);
        // Three DataNodes, each block on all three (HDFS's default replication, a pipeline as on a
        // real cluster). A file's close (complete) succeeds once the NameNode has processed a
        // DataNode's report of the last block; the first complete often races that report and
        // hdfs-native retries it after a fixed 500 ms. The longer the pipeline, the earlier its last
        // DataNode reports relative to the client's complete: ~0.28 s per close with one DataNode,
        // ~0.07 s with three (docs/CLUSTERS.md). dfs.namenode.file.close.num-committed-allowed=1
        // would skip the wait, but hdfs-native then reads a just-closed file as empty: not used.
        conf.setInt("dfs.replication", 3);
        // a DataNode fsyncs a block's file when the block is finalized (the commit's durability on a
        // power cut, docs/DESIGN.md)
        conf.setBoolean("dfs.datanode.synconclose", true);
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            conf.set(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        // rocketlake.minicluster.restart=PORT: the cluster whose data is under the directory again
        // (after a kill -9 of this JVM: a power cut), its NameNode on the same port
        int restart = conf.getInt("rocketlake.minicluster.restart", 0);
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
                .nameNodePort(restart).nameNodeHttpPort(0).numDataNodes(conf.getInt("dfs.replication", 3))
                .format(restart == 0).build();
        cluster.waitActive();
        while (cluster.getNameNode().isInSafeMode()) {
            Thread.sleep(100);          // until the DataNodes' block reports are in
        }
        System.out.println("ready hdfs://127.0.0.1:" + cluster.getNameNodePort());
        System.out.flush();
        try {
            while (System.in.read() != -1) {
                // wait for EOF
            }
        } finally {
            cluster.shutdown();
        }
        System.exit(0);
    }
}
