package rocketlake.brokercheck;

import java.io.FileWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Delay-level and transactional messages through RocketMQ's own clients. {@code n} messages with
 * a delay level (1 and 2 in turn: 1 s and 5 s with the broker's default levels) go to the delay
 * topic with key {@code delay-i}; the broker stores them in SCHEDULE_TOPIC_XXXX and, once due,
 * again in the topic. {@code n} transactional messages go to the transaction topic with key
 * {@code trans-i}: the broker stores each as a half message (RMQ_SYS_TRANS_HALF_TOPIC); the local
 * transaction commits even i (the broker then stores it in the topic) and rolls back odd i (an op
 * message in RMQ_SYS_TRANS_OP_HALF_TOPIC only). Every SEND_OK is one tab-separated line (kind, i,
 * topic, queue id, queue offset, offsetMsgId, msgId, key, level or COMMIT/ROLLBACK), flushed.
 */
final class Specials {
    private Specials() {
    }

    /** "SENT FAILED". */
    static String send(String nsAddr, String file, int n, long first, String delayTopic, String transTopic)
            throws Exception {
        long sent = 0;
        long failed = 0;
        String instance = "rocketlake-specials-" + ProcessHandle.current().pid();
        DefaultMQProducer delays = new DefaultMQProducer("rocketlake_delay_producer");
        TransactionMQProducer trans = new TransactionMQProducer("rocketlake_trans_producer");
        for (DefaultMQProducer p : new DefaultMQProducer[] {delays, trans}) {
            p.setNamesrvAddr(nsAddr);
            p.setInstanceName(instance);
            p.setVipChannelEnabled(false);
            p.setRetryTimesWhenSendFailed(0);
        }
        trans.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return ((Long) arg) % 2 == 0 ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                long i = Long.parseLong(msg.getKeys().substring("trans-".length()));
                return i % 2 == 0 ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        delays.start();
        trans.start();
        try (PrintWriter w = new PrintWriter(new FileWriter(file, StandardCharsets.UTF_8, true))) {
            for (long i = first; i < first + n; i++) {
                int level = 1 + (int) (i % 2);
                Message m = new Message(delayTopic, "delayed", "delay-" + i, ("delayed " + i).getBytes(StandardCharsets.UTF_8));
                m.setDelayTimeLevel(level);
                try {
                    SendResult r = delays.send(m, 3000);
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        w.println(line("delay", i, r, "delay-" + i, String.valueOf(level)));
                        sent++;
                    } else {
                        failed++;
                    }
                } catch (Exception e) {
                    failed++;
                }
                Message t = new Message(transTopic, "tx", "trans-" + i, ("transaction " + i).getBytes(StandardCharsets.UTF_8));
                try {
                    SendResult r = trans.sendMessageInTransaction(t, i);
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        w.println(line("trans", i, r, "trans-" + i, i % 2 == 0 ? "COMMIT" : "ROLLBACK"));
                        sent++;
                    } else {
                        failed++;
                    }
                } catch (Exception e) {
                    failed++;
                }
                w.flush();
            }
        } finally {
            delays.shutdown();
            trans.shutdown();
        }
        return sent + "\t" + failed;
    }

    private static String line(String kind, long i, SendResult r, String key, String what) {
        return kind + "\t" + i + "\t" + r.getMessageQueue().getTopic() + "\t" + r.getMessageQueue().getQueueId() + "\t"
            + r.getQueueOffset() + "\t" + r.getOffsetMsgId() + "\t" + r.getMsgId() + "\t" + key + "\t" + what;
    }
}
