package org.rocketlake.spark;

import java.io.Closeable;
import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.FutureDataInputStreamBuilder;
import org.apache.hadoop.fs.Path;

/**
 * The bytes of one store file, wherever it is: a local file (memory-mapped), or a file on a
 * Hadoop file system (s3a://, hdfs://: the ones Spark itself reads) that is either one object or
 * assembled from extents of objects (storelib.io.fragments: bytes no extent covers are zeros).
 * Remote reads are positioned range reads of exactly the bytes asked for (S3A's "random" read
 * policy: one ranged GET per read, no read-ahead past it; reads at once each on a stream of its own), counted in Hadoop's own statistics of
 * the file system (bytes read, read operations) like Spark's other readers' reads. A stream is
 * opened with the length the plan already knows (an object: at least the end of the extents read
 * from it; a file that is one object: its status, asked for once): without it S3A asks the server
 * for the object's metadata (a HEAD) per stream opened.
 */
abstract class FileBytes implements Closeable {
    final String rel;

    FileBytes(String rel) {
        this.rel = rel;
    }

    static FileBytes open(String file, String rel, Plan.Source source, Map<String, String> hadoop) {
        if (source == null && hadoop == null) {
            return new Local(file, rel);
        }
        return new Remote(file, rel, source, hadoop);
    }

    /** Whether {@link #bytes} of a whole split is cheap (mapped, not read). */
    abstract boolean mapped();

    abstract long size() throws IOException;

    /** Bytes [pos, pos + len) of the file as a buffer whose index 0 is pos. */
    abstract ByteBuffer bytes(long pos, long len) throws IOException;

    /** {@link #bytes}, and where it is read into the heap (remote) with {@code room} free bytes
     *  in its array before index 0 ({@code arrayOffset() == room}): a caller can put bytes it has
     *  in front of them without copying these. */
    ByteBuffer bytes(long pos, long len, int room) throws IOException {
        return bytes(pos, len);
    }

    /** {@link #bytes(long, long, int)} read into {@code into} when it is not null and holds
     *  room + len bytes (remote: a caller's buffer used again, no new array of a window's size). */
    ByteBuffer bytes(long pos, long len, int room, byte[] into) throws IOException {
        return bytes(pos, len, room);
    }

    /** A local file, memory-mapped. */
    static final class Local extends FileBytes {
        private final FileChannel channel;

        Local(String file, String rel) {
            super(rel);
            try {
                channel = FileChannel.open(Paths.get(file), StandardOpenOption.READ);
            } catch (NoSuchFileException e) {
                throw Corrupt.missing(rel, "missing file");
            } catch (IOException e) {
                throw new UncheckedIOException("rocketmq source: cannot open " + file, e);
            }
        }

        @Override
        boolean mapped() {
            return true;
        }

        @Override
        long size() throws IOException {
            return channel.size();
        }

        @Override
        ByteBuffer bytes(long pos, long len) throws IOException {
            return channel.map(FileChannel.MapMode.READ_ONLY, pos, len);
        }

        @Override
        public void close() throws IOException {
            channel.close();
        }
    }

    /** A file on a Hadoop file system: one object, or assembled from extents of objects. */
    static final class Remote extends FileBytes {
        // One file system instance per (scheme, authority, settings) and JVM, like Hadoop's own
        // cache, but keyed by the settings too: two stores in one bucket name on two servers.
        private static final Map<List<Object>, FileSystem> SYSTEMS = new ConcurrentHashMap<>();

        private final String file;
        private final Plan.Source source;
        private final Map<String, String> hadoop;
        // idle open streams per object: reads of one file may run at once (a split's windows read
        // ahead), each on a stream of its own (a stream's positioned reads take turns)
        private final Map<String, ArrayDeque<FSDataInputStream>> idle = new HashMap<>();
        // object -> the length it is opened with: the furthest end of this file's extents in it
        // (the object may be longer: Hadoop's openFile takes the length as a lower bound, and no
        // read goes past it)
        private final Map<String, Long> lengths = new HashMap<>();
        private volatile FileStatus status;     // a file that is one object: got once, for its size

        Remote(String file, String rel, Plan.Source source, Map<String, String> hadoop) {
            super(rel);
            this.file = file;
            this.source = source;
            this.hadoop = hadoop == null ? Map.of() : hadoop;
            if (source != null) {
                for (int k = 0; k < source.objects.length; k++) {
                    lengths.merge(source.objects[k], source.objectPos[k] + source.length[k], Math::max);
                }
            }
        }

        @Override
        boolean mapped() {
            return false;
        }

        @Override
        long size() throws IOException {
            if (source != null) {
                return source.size;
            }
            return status().getLen();
        }

        private FileStatus status() throws IOException {
            FileStatus st = status;
            if (st == null) {
                try {
                    st = status = system(file).getFileStatus(new Path(file));
                } catch (FileNotFoundException e) {
                    throw Corrupt.missing(rel, "missing file");
                }
            }
            return st;
        }

        @Override
        ByteBuffer bytes(long pos, long len) throws IOException {
            return bytes(pos, len, 0);
        }

        @Override
        ByteBuffer bytes(long pos, long len, int room) throws IOException {
            return bytes(pos, len, room, null);
        }

        @Override
        ByteBuffer bytes(long pos, long len, int room, byte[] into) throws IOException {
            int n = Math.toIntExact(len);
            byte[] out = into != null && into.length >= room + n ? into : new byte[room + n];
            if (source == null) {
                read(file, pos, out, room, n);
                return ByteBuffer.wrap(out, room, n).slice();
            }
            long end = Math.min(pos + len, source.size);
            long done = pos;                 // out holds the file's bytes up to here
            for (int k = source.first(pos); k < source.filePos.length && source.filePos[k] < end; k++) {
                long a = Math.max(pos, source.filePos[k]);
                long b = Math.min(end, source.filePos[k] + source.length[k]);
                if (a < b) {
                    java.util.Arrays.fill(out, room + (int) (done - pos), room + (int) (a - pos), (byte) 0);
                    read(source.objects[k], source.objectPos[k] + (a - source.filePos[k]), out, room + (int) (a - pos),
                        (int) (b - a));
                    done = b;
                }
            }
            java.util.Arrays.fill(out, room + (int) (done - pos), room + n, (byte) 0);   // no extent: zeros
            return ByteBuffer.wrap(out, room, n).slice();
        }

        private void read(String object, long at, byte[] out, int off, int n) throws IOException {
            FSDataInputStream in;
            synchronized (idle) {
                in = idle.computeIfAbsent(object, o -> new ArrayDeque<>()).poll();
            }
            try {
                if (in == null) {
                    in = open(object);
                }
                in.readFully(at, out, off, n);
                synchronized (idle) {
                    idle.get(object).push(in);
                }
                in = null;
            } catch (FileNotFoundException e) {
                throw Corrupt.missing(rel, "missing " + (object.equals(file) ? "file" : "object " + object));
            } catch (EOFException e) {
                throw Corrupt.at(rel, 0, (object.equals(file) ? "file" : "object " + object) + " ends before "
                    + (at + n) + " (" + e.getMessage() + ")");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted opening " + object, e);
            } catch (java.util.concurrent.ExecutionException e) {
                if (e.getCause() instanceof FileNotFoundException) {
                    throw Corrupt.missing(rel, "missing " + (object.equals(file) ? "file" : "object " + object));
                }
                throw new IOException("cannot open " + object, e.getCause());
            } finally {
                if (in != null) {
                    in.close();      // a read that failed: its stream is not used again
                }
            }
        }

        /** A stream on {@code object}, opened without asking the server for what the plan knows. */
        private FSDataInputStream open(String object) throws IOException, InterruptedException,
                java.util.concurrent.ExecutionException {
            FutureDataInputStreamBuilder b = system(object).openFile(new Path(object))
                .opt("fs.option.openfile.read.policy", "random");
            Long len = lengths.get(object);
            if (len != null) {
                b.opt("fs.option.openfile.length", Long.toString(len));
            } else if (object.equals(file)) {
                b.withFileStatus(status());
            }
            return b.build().get();
        }

        private FileSystem system(String uri) throws IOException {
            URI u = URI.create(uri);
            List<Object> key = List.of(String.valueOf(u.getScheme()), String.valueOf(u.getAuthority()), hadoop);
            FileSystem fs = SYSTEMS.get(key);
            if (fs == null) {
                Configuration conf = new Configuration();
                conf.setClassLoader(FileBytes.class.getClassLoader());
                hadoop.forEach(conf::set);
                fs = FileSystem.newInstance(u, conf);
                FileSystem had = SYSTEMS.putIfAbsent(key, fs);
                if (had != null) {
                    fs.close();
                    fs = had;
                }
            }
            return fs;
        }

        @Override
        public void close() throws IOException {
            synchronized (idle) {
                for (ArrayDeque<FSDataInputStream> ins : idle.values()) {
                    for (FSDataInputStream in : ins) {
                        in.close();
                    }
                }
                idle.clear();
            }
        }
    }
}
