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
 *
 * <p>With a timer topic also: {@code n} timer messages ({@code setDelayTimeSec(3)}, key
 * {@code timer-i}; the broker's timer wheel, rmq_sys_wheel_timer, must be enabled), and {@code n}
 * transactional messages (key {@code check-i}) whose local transaction answers UNKNOW, so that
 * the broker's check-back resolves them: i % 3 == 0 commits (CHECK_COMMIT), 1 rolls back
 * (CHECK_ROLLBACK), 2 answers UNKNOW every time (CHECK_UNKNOWN: the half message stays unresolved).
 * Their producer stays up, answering check-backs, until {@link #shutdown}.
 */
final class Specials {
    private static TransactionMQProducer checked;

    private Specials() {
    }

    static String checkAnswer(long i) {
        return i % 3 == 0 ? "CHECK_COMMIT" : i % 3 == 1 ? "CHECK_ROLLBACK" : "CHECK_UNKNOWN";
    }

    /** The check-back producer, if {@link #send} started one. */
    static void shutdown() {
        if (checked != null) {
            checked.shutdown();
            checked = null;
        }
    }

    private static TransactionMQProducer checkedProducer(String nsAddr, String instance) throws Exception {
        if (checked == null) {
            TransactionMQProducer p = new TransactionMQProducer("rocketlake_checked_producer");
            p.setNamesrvAddr(nsAddr);
            p.setInstanceName(instance + "-checked");
            p.setVipChannelEnabled(false);
            p.setRetryTimesWhenSendFailed(0);
            p.setTransactionListener(new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                    return LocalTransactionState.UNKNOW;
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                    String a = checkAnswer(Long.parseLong(msg.getKeys().substring("check-".length())));
                    return a.equals("CHECK_COMMIT") ? LocalTransactionState.COMMIT_MESSAGE
                        : a.equals("CHECK_ROLLBACK") ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
                }
            });
            p.start();
            checked = p;
        }
        return checked;
    }

    /** "SENT FAILED". */
    static String send(String nsAddr, String file, int n, long first, String delayTopic, String transTopic,
            String timerTopic) throws Exception {
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
        TransactionMQProducer check = timerTopic == null ? null : checkedProducer(nsAddr, instance);
        try (PrintWriter w = new PrintWriter(new FileWriter(file, StandardCharsets.UTF_8, true))) {
            for (long i = first; i < first + n; i++) {
                final long k = i;
                int level = 1 + (int) (i % 2);
                Message m = new Message(delayTopic, "delayed", "delay-" + i, ("delayed " + i).getBytes(StandardCharsets.UTF_8));
                m.setDelayTimeLevel(level);
                int ok = record(w, "delay", i, "delay-" + i, String.valueOf(level), () -> delays.send(m, 3000));
                Message t = new Message(transTopic, "tx", "trans-" + i, ("transaction " + i).getBytes(StandardCharsets.UTF_8));
                ok += record(w, "trans", i, "trans-" + i, i % 2 == 0 ? "COMMIT" : "ROLLBACK",
                    () -> trans.sendMessageInTransaction(t, k));
                int tries = 2;
                if (timerTopic != null) {
                    Message m2 = new Message(timerTopic, "timer", "timer-" + i, ("timer " + i).getBytes(StandardCharsets.UTF_8));
                    m2.setDelayTimeSec(3);
                    ok += record(w, "timer", i, "timer-" + i, "3", () -> delays.send(m2, 3000));
                    Message c = new Message(transTopic, "tx", "check-" + i, ("checked " + i).getBytes(StandardCharsets.UTF_8));
                    ok += record(w, "check", i, "check-" + i, checkAnswer(i), () -> check.sendMessageInTransaction(c, k));
                    tries = 4;
                }
                sent += ok;
                failed += tries - ok;
                w.flush();
            }
        } finally {
            delays.shutdown();
            trans.shutdown();
        }
        return sent + "\t" + failed;
    }

    private interface Send {
        SendResult send() throws Exception;
    }

    /** 1 and a line in the file for a SEND_OK, else 0. */
    private static int record(PrintWriter w, String kind, long i, String key, String what, Send send) {
        try {
            SendResult r = send.send();
            if (r.getSendStatus() == SendStatus.SEND_OK) {
                w.println(line(kind, i, r, key, what));
                return 1;
            }
        } catch (Exception e) {
            // counted as failed
        }
        return 0;
    }

    private static String line(String kind, long i, SendResult r, String key, String what) {
        return kind + "\t" + i + "\t" + r.getMessageQueue().getTopic() + "\t" + r.getMessageQueue().getQueueId() + "\t"
            + r.getQueueOffset() + "\t" + r.getOffsetMsgId() + "\t" + r.getMsgId() + "\t" + key + "\t" + what;
    }
}
