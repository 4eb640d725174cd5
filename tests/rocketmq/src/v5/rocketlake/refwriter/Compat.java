package rocketlake.refwriter;

import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.common.BoundaryType;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.SystemClock;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.TopicAttributes;
import org.apache.rocketmq.store.RocksDBMessageStore;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import org.apache.rocketmq.store.ha.DefaultHAService;

/** What differs between RocketMQ lines, 5.x side: the store's constructor and its HA service. */
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
        // topics with the batch consume queue: their TopicConfig says queue.type=BatchCQ
        ConcurrentHashMap<String, TopicConfig> topics = new ConcurrentHashMap<>();
        for (String t : batchCQTopics) {
            TopicConfig tc = new TopicConfig(t, 8, 8);
            java.util.Map<String, String> attrs = new java.util.HashMap<>();
            attrs.put(TopicAttributes.QUEUE_TYPE_ATTRIBUTE.getName(), "BatchCQ");
            tc.setAttributes(attrs);
            topics.put(t, tc);
        }
        DefaultMessageStore store;
        if ("defaultRocksDB".equals(cfg.getStoreType())) {
            store = new RocksDBMessageStore(cfg, stats, null, new BrokerConfig(), topics) {
                @Override
                public SystemClock getSystemClock() {
                    return clock != null ? clock : super.getSystemClock();
                }
            };
        } else {
            store = new DefaultMessageStore(cfg, stats, null, new BrokerConfig(), topics) {
                @Override
                public SystemClock getSystemClock() {
                    return clock != null ? clock : super.getSystemClock();
                }
            };
        }
        NoHA ha = new NoHA();
        ha.init(store);
        Fields.set(store, "haService", ha);
        return store;
    }

    /** The batch-level properties string (5.x keeps it beside the map). */
    static void setBatchPropertiesString(org.apache.rocketmq.common.message.MessageExtBatch b, String s) {
        b.setPropertiesString(s);
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

    /** getOffsetInQueueByTime with the boundary (5.x). */
    static long offsetInQueueByTime(DefaultMessageStore store, String topic, int queueId, long ts, String boundary) {
        return store.getOffsetInQueueByTime(topic, queueId, ts, BoundaryType.valueOf(boundary));
    }

    static PutMessageResult put(DefaultMessageStore store, MessageExt m) {
        return store.putMessage((MessageExtBrokerInner) m);
    }

    /** HA that listens on no port: the writer is a lone master, nothing replicates from it. */
    static final class NoHA extends DefaultHAService {
        @Override
        public void start() {
        }

        @Override
        public void shutdown() {
        }
    }
}
