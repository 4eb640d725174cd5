package rocketlake.refwriter;

import java.io.BufferedReader;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.PutMessageStatus;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * The benchmark's anchor: RocketMQ's own DefaultMessageStore writes a store as a broker does, one
 * putMessage per message from one thread, the reput thread building consume queues and the index
 * behind it (no wait per message, unlike {@link RefWriter}, which waits so that every golden byte is
 * deterministic), then waits until everything is dispatched and shuts the store down cleanly.
 *
 * <p>Arguments: {@code store messages.tsv config.properties} (RefWriter's formats; in the same
 * package for its parsing and {@link Compat}). The store clock is set to each message's
 * store_timestamp, as RefWriter does, so the bytes can be compared with another writer's.
 *
 * <p>One line on stdout: {@code phases messages=N open_s=.. parse_s=.. put_s=.. dispatch_wait_s=..
 * shutdown_s=..}: open = new store + load + start; parse = reading and decoding the input lines
 * into messages; put = putMessage (encode + append to the CommitLog); dispatch_wait = until the
 * reput thread has caught up; shutdown = the store's clean shutdown (flushes, checkpoint).
 */
public final class BenchWriter {
    private BenchWriter() {
    }

    public static void main(String[] args) throws Exception {
        String storeDir = args[0];
        long t0 = System.nanoTime();
        MessageStoreConfig cfg = RefWriter.config(storeDir, args[2]);
        RefWriter.Clock clock = new RefWriter.Clock();
        clock.now = System.currentTimeMillis();
        DefaultMessageStore store = Compat.newStore(cfg, clock);
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed for " + storeDir);
        }
        store.start();
        long tOpen = System.nanoTime();
        long parse = 0;
        long put = 0;
        long n = 0;
        long tPut;
        try (BufferedReader r = Files.newBufferedReader(new File(args[1]).toPath(), StandardCharsets.UTF_8)) {
            while (true) {
                long a = System.nanoTime();
                String line = r.readLine();
                if (line == null) {
                    break;
                }
                if (line.isEmpty()) {
                    continue;
                }
                MessageExt msg = RefWriter.message(line.split("\t", -1));
                long b = System.nanoTime();
                clock.now = msg.getStoreTimestamp();
                PutMessageResult res = Compat.put(store, msg);
                if (res.getPutMessageStatus() != PutMessageStatus.PUT_OK) {
                    throw new IllegalStateException("message " + n + ": putMessage answered " + res.getPutMessageStatus());
                }
                put += System.nanoTime() - b;
                parse += b - a;
                n++;
            }
            tPut = System.nanoTime();
            while (store.dispatchBehindBytes() > 0) {
                Thread.sleep(1);
            }
        } catch (Throwable t) {
            store.shutdown();
            throw t;
        }
        long tDispatched = System.nanoTime();
        store.shutdown();
        long tEnd = System.nanoTime();
        System.out.printf("phases messages=%d open_s=%.3f parse_s=%.3f put_s=%.3f dispatch_wait_s=%.3f shutdown_s=%.3f%n",
            n, (tOpen - t0) / 1e9, parse / 1e9, put / 1e9, (tDispatched - tPut) / 1e9, (tEnd - tDispatched) / 1e9);
        System.out.flush();
        System.exit(0);
    }
}
