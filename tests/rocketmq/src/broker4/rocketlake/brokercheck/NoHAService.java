package rocketlake.brokercheck;

import java.io.IOException;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.ha.HAService;

/** 4.9's HA service, listening on no port (a lone master; HA's listener binds every interface). */
public class NoHAService extends HAService {
    public NoHAService(DefaultMessageStore store) throws IOException {
        super(store);
    }

    @Override
    public void start() {
    }

    @Override
    public void shutdown() {
    }
}
