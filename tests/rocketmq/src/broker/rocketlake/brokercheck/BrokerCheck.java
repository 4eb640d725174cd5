package rocketlake.brokercheck;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.nio.ByteBuffer;
import org.apache.rocketmq.remoting.InvokeCallback;
import org.apache.rocketmq.remoting.netty.ResponseFuture;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.header.QueryMessageRequestHeader;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.client.impl.consumer.PullResultExt;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.common.sysflag.PullSysFlag;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import static rocketlake.brokercheck.MsgLine.msg;
import static rocketlake.brokercheck.Reflect.field;

/**
 * A real RocketMQ name server and broker on 127.0.0.1 (ephemeral ports) over a given
 * storePathRootDir, and a real client (DefaultMQPullConsumer) reading it.
 *
 * <p>Args: {@code STORE_ROOT WORK_DIR [key=value MessageStoreConfig settings...]} ({@code broker.key=value}:
 * a BrokerConfig setting; {@code namesrv=HOST:PORT}: register with that name server, e.g. a slave
 * with its master's, instead of starting one). Once up it answers {@code ready NAMESRV PORT HA_PORT}. Commands come
 * on stdin, one per line; answers go to stdout, each ending with a line {@code end}:
 * <ul>
 * <li>{@code consume TOPIC NQUEUES}: queues 0..NQUEUES-1 of the topic from min to max offset:
 *     {@code queue Q MIN MAX}, then {@code msg} lines (tab-separated, text fields base64);</li>
 * <li>{@code query TOPIC KEY MAXNUM BEGIN END}: queryMessage's messages, as {@code msg} lines;</li>
 * <li>{@code view TOPIC OFFSET_MSG_ID}: viewMessage's message, as a {@code msg} line (or {@code error});</li>
 * <li>{@code specials FILE N FIRST DELAY_TOPIC TRANS_TOPIC [TIMER_TOPIC]}: N delay-level and N transactional
 *     messages (Specials; with a timer topic also N timer messages and N transactional ones resolved
 *     by the broker's check-back), {@code produced SENT FAILED};</li>
 * <li>{@code offsets}: the store's min and max CommitLog offset, {@code offsets MIN MAX};</li>
 * <li>{@code quit}: shut everything down.</li>
 * </ul>
 * A msg line: topic, queueId, queueOffset, commitLogOffset, offsetMsgId, msgId, flag, sysFlag,
 * bornTimestamp, bornHost, storeTimestamp, storeHost, reconsumeTimes, preparedTransactionOffset,
 * body, then name:value pairs of the properties (each base64).
 */
public final class BrokerCheck {
    private BrokerCheck() {
    }

    public static void main(String[] args) throws Exception {
        String storeRoot = args[0];
        String work = args[1];
        // The answers alone go to stdout; whatever else prints there (logging without a configuration:
        // the broker's stats once a minute) goes to stderr, so no log text can land inside an answer line.
        java.io.PrintStream answers = System.out;
        System.setOut(System.err);
        PrintWriter out = new PrintWriter(new java.io.OutputStreamWriter(answers, StandardCharsets.UTF_8), true);

        // namesrv=HOST:PORT (a slave's JVM: its master's name server) or a name server of our own
        String nsAddr = null;
        for (int i = 2; i < args.length; i++) {
            if (args[i].startsWith("namesrv=")) {
                nsAddr = args[i].substring("namesrv=".length());
            }
        }
        NamesrvController namesrv = null;
        if (nsAddr == null) {
            NamesrvConfig nsConfig = new NamesrvConfig();
            nsConfig.setKvConfigPath(work + "/namesrv/kvConfig.json");
            nsConfig.setConfigStorePath(work + "/namesrv/namesrv.properties");
            NettyServerConfig nsNetty = new NettyServerConfig();
            nsNetty.setListenPort(0);
            nsNetty.setBindAddress("127.0.0.1");
            namesrv = new NamesrvController(nsConfig, nsNetty, new NettyClientConfig());
            if (!namesrv.initialize()) {
                throw new IllegalStateException("name server did not initialize");
            }
            namesrv.start();
            nsAddr = "127.0.0.1:" + namesrv.getRemotingServer().localListenPort();
        }

        BrokerConfig bc = new BrokerConfig();
        bc.setBrokerName("rocketlake-broker");
        bc.setBrokerClusterName("rocketlake");
        bc.setBrokerIP1("127.0.0.1");
        bc.setBrokerIP2("127.0.0.1");           // the HA address the broker registers
        bc.setNamesrvAddr(nsAddr);
        bc.setAutoCreateTopicEnable(false);
        NettyServerConfig bNetty = new NettyServerConfig();
        bNetty.setListenPort(0);
        bNetty.setBindAddress("127.0.0.1");
        MessageStoreConfig sc = new MessageStoreConfig();
        sc.setStorePathRootDir(storeRoot);
        sc.setStorePathCommitLog(storeRoot + "/commitlog");
        sc.setTimerWheelEnable(false);
        sc.setHaListenPort(0);
        for (int i = 2; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            if (kv[0].equals("namesrv")) {
                continue;
            } else if (kv[0].startsWith("broker.")) {       // a BrokerConfig setting (transactionCheckInterval, ...)
                rocketlake.brokercheck.Config.set(bc, kv[0].substring("broker.".length()), kv[1]);
            } else {
                rocketlake.brokercheck.Config.set(sc, kv[0], kv[1]);
            }
        }
        BrokerController broker = new BrokerController(bc, bNetty, new NettyClientConfig(), sc);
        if (!broker.initialize()) {
            throw new IllegalStateException("broker did not initialize");
        }
        broker.start();
        // wait until the broker is registered with the name server
        for (int i = 0; namesrv != null && i < 200 && namesrv.getRouteInfoManager().getAllClusterInfo().getBrokerAddrTable().isEmpty(); i++) {
            Thread.sleep(50);
        }

        // Register the topic table (again, synchronously) so the name server has the routes.
        broker.registerBrokerAll(true, false, true);
        String brokerAddr = "127.0.0.1:" + bNetty.getListenPort();

        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer("rocketlake_check");
        consumer.setNamesrvAddr(nsAddr);
        consumer.setInstanceName("rocketlake-check-" + ProcessHandle.current().pid());
        consumer.setVipChannelEnabled(false);
        consumer.start();
        MQClientInstance client = (MQClientInstance) field(consumer.getDefaultMQPullConsumerImpl(), "mQClientFactory");
        out.println("ready " + nsAddr + " " + bNetty.getListenPort() + " " + sc.getHaListenPort());
        out.println("end");

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        Producing producing = null;
        try {
            while ((line = in.readLine()) != null) {
                String[] f = line.split("\t", -1);
                try {
                    if (f[0].equals("quit")) {
                        break;
                    } else if (f[0].equals("topics")) {
                        Producing.createTopics(broker, f[1].split(","), Integer.parseInt(f[2]));
                        out.println("produced\ttopics");
                    } else if (f[0].equals("produce")) {
                        producing = new Producing(nsAddr, f[1], Double.parseDouble(f[2]), Long.parseLong(f[3]), f[4].split(","));
                        producing.begin();
                        out.println("produced\tstarted");
                    } else if (f[0].equals("specials")) {
                        out.println("produced\t" + Specials.send(nsAddr, f[1], Integer.parseInt(f[2]), Long.parseLong(f[3]), f[4], f[5],
                            f.length > 6 ? f[6] : null));
                    } else if (f[0].equals("stopproduce")) {
                        out.println("produced\t" + producing.end());
                    } else if (f[0].equals("offsets")) {
                        out.println("offsets\t" + broker.getMessageStore().getMinPhyOffset() + "\t"
                            + broker.getMessageStore().getMaxPhyOffset());
                    } else if (f[0].equals("consume")) {
                        consume(consumer, client, brokerAddr, f[1], Integer.parseInt(f[2]), out);
                    } else if (f[0].equals("query")) {
                        for (MessageExt m : query(client, brokerAddr, f)) {
                            out.println(msg(m));
                        }
                    } else if (f[0].equals("view")) {
                        // viewMessage by offset msgId: the id names the commit-log offset and the
                        // store host recorded in the message (the input's, not this broker's);
                        // the client's VIEW_MESSAGE_BY_ID request goes to this broker instead.
                        long offset = MessageDecoder.decodeMessageId(f[2]).getOffset();
                        out.println(msg(client.getMQClientAPIImpl().viewMessage(brokerAddr, f[1], offset, 10000)));
                    }
                } catch (Exception e) {
                    out.println("error\t" + e.toString().replace('\n', ' ').replace('\t', ' '));
                }
                out.println("end");
            }
        } finally {
            Specials.shutdown();
            consumer.shutdown();
            broker.shutdown();
            if (namesrv != null) {
                namesrv.shutdown();
            }
        }
        out.println("stopped");
        out.flush();
        System.exit(0);
    }

    /**
     * The client's QUERY_MESSAGE request (what DefaultMQPullConsumer.queryMessage sends to each
     * broker of the topic's route), sent to this broker: the name server has no routes for the
     * topics of a store the broker found on disk (see consume). The client-side filter that
     * queryMessage applies (KEYS holding the key) is the caller's.
     */
    static List<MessageExt> query(MQClientInstance client, String brokerAddr, String[] f) throws Exception {
        QueryMessageRequestHeader h = new QueryMessageRequestHeader();
        h.setTopic(f[1]);
        h.setKey(f[2]);
        h.setMaxNum(Integer.parseInt(f[3]));
        h.setBeginTimestamp(Long.parseLong(f[4]));
        h.setEndTimestamp(Long.parseLong(f[5]));
        CountDownLatch done = new CountDownLatch(1);
        List<MessageExt> found = new ArrayList<>();
        Throwable[] failed = new Throwable[1];
        client.getMQClientAPIImpl().queryMessage(brokerAddr, h, 10000, new InvokeCallback() {
            @Override
            public void operationComplete(ResponseFuture rf) {
            }

            @Override
            public void operationSucceed(RemotingCommand response) {
                if (response.getCode() == ResponseCode.SUCCESS && response.getBody() != null) {
                    found.addAll(MessageDecoder.decodesBatch(ByteBuffer.wrap(response.getBody()), true, false, true));
                } else if (response.getCode() != ResponseCode.QUERY_NOT_FOUND) {
                    failed[0] = new IllegalStateException("QUERY_MESSAGE answered " + response.getCode() + " " + response.getRemark());
                }
                done.countDown();
            }

            @Override
            public void operationFail(Throwable t) {
                failed[0] = t;
                done.countDown();
            }
        }, false);
        if (!done.await(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("QUERY_MESSAGE: no answer");
        }
        if (failed[0] != null) {
            throw new IllegalStateException(failed[0]);
        }
        return found;
    }

    /**
     * Every queue 0..nqueues-1 of the topic, from its min offset to its max offset, through the
     * client's own requests (GET_MIN_OFFSET, GET_MAX_OFFSET, PULL_MESSAGE; decoded as the
     * consumer decodes them) sent to this broker. The consumer's own pull() would first look the
     * broker up in the topic's route, and the name server has no routes for a store the broker
     * found on disk (a "route" line says so).
     */
    static void consume(DefaultMQPullConsumer consumer, MQClientInstance client, String brokerAddr, String topic,
                        int nqueues, PrintWriter out) throws Exception {
        try {
            consumer.fetchSubscribeMessageQueues(topic);
        } catch (Exception e) {
            out.println("route\t" + e.toString().replace('\n', ' ').replace('\t', ' '));
        }
        for (int q = 0; q < nqueues; q++) {
            MessageQueue mq = new MessageQueue(topic, "rocketlake-broker", q);
            long min = client.getMQClientAPIImpl().getMinOffset(brokerAddr, mq, 10000);
            long max = client.getMQClientAPIImpl().getMaxOffset(brokerAddr, mq, 10000);
            out.println("queue\t" + q + "\t" + min + "\t" + max);
            long offset = min;
            while (offset < max) {
                PullMessageRequestHeader h = new PullMessageRequestHeader();
                h.setConsumerGroup("rocketlake_check");
                h.setTopic(topic);
                h.setQueueId(q);
                h.setQueueOffset(offset);
                h.setMaxMsgNums(32);
                h.setSysFlag(PullSysFlag.buildSysFlag(false, false, true, false));
                h.setCommitOffset(0L);
                h.setSuspendTimeoutMillis(0L);
                h.setSubscription("*");
                h.setSubVersion(0L);
                h.setExpressionType("TAG");
                PullResult r = client.getMQClientAPIImpl().pullMessage(brokerAddr, h, 10000, CommunicationMode.SYNC, null);
                if (r.getPullStatus() != PullStatus.FOUND) {
                    out.println("pull\t" + q + "\t" + offset + "\t" + r.getPullStatus() + "\t" + r.getNextBeginOffset());
                    if (r.getNextBeginOffset() <= offset) {
                        break;
                    }
                } else {
                    byte[] bin = ((PullResultExt) r).getMessageBinary();
                    for (MessageExt m : MessageDecoder.decodesBatch(ByteBuffer.wrap(bin), true, true, true)) {
                        out.println(msg(m));
                    }
                }
                offset = r.getNextBeginOffset();
            }
        }
    }
}
