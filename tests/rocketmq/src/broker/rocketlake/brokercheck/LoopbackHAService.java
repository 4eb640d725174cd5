package rocketlake.brokercheck;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.lang.reflect.Field;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.ha.DefaultHAService;

/**
 * The broker's HA service, loaded through RocketMQ's META-INF/service file. RocketMQ's own listener
 * binds every interface, so by default none is started (a lone master). With
 * {@code -Drocketlake.ha=loopback} (a master and its slave) it is RocketMQ's DefaultHAService, its
 * listener bound to 127.0.0.1 (haListenPort 0: an ephemeral port, which the broker registers).
 */
public class LoopbackHAService extends DefaultHAService {
    private final boolean on = "loopback".equals(System.getProperty("rocketlake.ha"));

    @Override
    public void init(DefaultMessageStore store) throws IOException {
        super.init(store);
        if (on) {
            int port = store.getMessageStoreConfig().getHaListenPort();
            try {
                Field f = listenAddressField(acceptSocketService.getClass());
                f.setAccessible(true);
                f.set(acceptSocketService, new InetSocketAddress("127.0.0.1", port));
            } catch (ReflectiveOperationException e) {
                throw new IOException("cannot bind the HA listener to 127.0.0.1", e);
            }
        }
    }

    /** The (private final) address the accept service binds: its one SocketAddress field. */
    private static Field listenAddressField(Class<?> c) throws NoSuchFieldException {
        for (; c != null; c = c.getSuperclass()) {
            for (Field f : c.getDeclaredFields()) {
                if (f.getType() == SocketAddress.class) {
                    return f;
                }
            }
        }
        throw new NoSuchFieldException("SocketAddress of the HA accept service");
    }

    @Override
    public void start() throws Exception {
        if (on) {
            super.start();
        }
    }

    @Override
    public void shutdown() {
        if (on) {
            super.shutdown();
        }
    }
}
