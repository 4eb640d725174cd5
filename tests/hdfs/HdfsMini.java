// Hadoop's HDFS mini cluster for the hdfs:// tests (tests/support/hdfscluster.py): one NameNode and
// one DataNode in this JVM, every port ephemeral on 127.0.0.1, data under the directory given.
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
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            conf.set(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
                .nameNodePort(0).nameNodeHttpPort(0).numDataNodes(1).format(true).build();
        cluster.waitActive();
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
