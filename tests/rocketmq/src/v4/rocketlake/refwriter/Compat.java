package rocketlake.refwriter;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.SystemClock;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import org.apache.rocketmq.store.ha.HAService;

/** What differs between RocketMQ lines, 4.9 side: the store's constructor and its HA service. */
final class Compat {
    private Compat() {
    }

    /** A store whose clock is the harness's (CommitLog stamps STORETIMESTAMP from getSystemClock()). */
    static DefaultMessageStore newStore(MessageStoreConfig cfg, SystemClock clock) throws Exception {
        return newStore(cfg, clock, null, java.util.Collections.emptyList());
    }

    /** With broker statistics (getMessage records into them): the store the queries are asked of.
     *  One store is built at a time: the writer builds several at once, and RocketMQ 5's
     *  StoreStatsService fills a static TreeMap in its constructor (concurrent builds can corrupt
     *  it and fail with a NullPointerException inside TreeMap). */
    static synchronized DefaultMessageStore newStore(MessageStoreConfig cfg, SystemClock clock, BrokerStatsManager stats,
            java.util.List<String> batchCQTopics) throws Exception {
        if (!batchCQTopics.isEmpty()) {
            throw new IllegalArgumentException("RocketMQ 4.9 has no batch consume queue (batchCQTopics)");
        }
        DefaultMessageStore store = new DefaultMessageStore(cfg, stats, null, new BrokerConfig()) {
            @Override
            public SystemClock getSystemClock() {
                return clock != null ? clock : super.getSystemClock();
            }
        };
        Fields.set(store, "haService", new NoHA(store));
        return store;
    }

    /** The batch-level properties string (5.x keeps it beside the map). */
    static void setBatchPropertiesString(org.apache.rocketmq.common.message.MessageExtBatch b, String s) {
        // 4.9's MessageExtBatch keeps only the properties map: its encoder reads that
    }

    /** The broker-side message type (its package differs between the lines). */
    static MessageExt newMessage() {
        return new MessageExtBrokerInner();
    }

    /** The stored properties string and the tags code, as the broker's send processor sets them. */
    static void setPropertiesString(MessageExt m, String propertiesString) {
        MessageExtBrokerInner inner = (MessageExtBrokerInner) m;
        inner.setPropertiesString(propertiesString);
        inner.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(inner.getTags()));
    }

    /** getOffsetInQueueByTime: 4.9 has no boundary. */
    static long offsetInQueueByTime(DefaultMessageStore store, String topic, int queueId, long ts, String boundary) {
        return store.getOffsetInQueueByTime(topic, queueId, ts);
    }

    static PutMessageResult put(DefaultMessageStore store, MessageExt m) {
        return store.putMessage((MessageExtBrokerInner) m);
    }

    /** HA that listens on no port: the writer is a lone master, nothing replicates from it. */
    static final class NoHA extends HAService {
        NoHA(DefaultMessageStore store) throws java.io.IOException {
            super(store);
        }

        @Override
        public void start() {
        }

        @Override
        public void shutdown() {
        }
    }
}
