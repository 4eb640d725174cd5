package rocketlake.brokercheck;

import org.apache.rocketmq.store.ha.DefaultHAService;

/** The broker's HA service, loaded through RocketMQ's META-INF/service file: listens on no port
 * (a lone master; HA's listener would bind every interface). */
public class NoHAService extends DefaultHAService {
    @Override
    public void start() {
    }

    @Override
    public void shutdown() {
    }
}
