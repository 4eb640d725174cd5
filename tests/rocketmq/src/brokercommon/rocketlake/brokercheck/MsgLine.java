package rocketlake.brokercheck;

import java.net.Inet6Address;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;

/** The "msg" answer line of one message (its layout: BrokerCheck's doc); the same classes in both lines. */
final class MsgLine {
    private MsgLine() {
    }

    static String b64(String s) {
        return Base64.getEncoder().encodeToString(s.getBytes(StandardCharsets.UTF_8));
    }

    static String host(SocketAddress a) {
        InetSocketAddress s = (InetSocketAddress) a;
        String h = s.getAddress().getHostAddress();
        return (s.getAddress() instanceof Inet6Address ? "[" + h + "]" : h) + ":" + s.getPort();
    }

    static String msg(MessageExt m) {
        StringBuilder b = new StringBuilder("msg");
        Object[] fields = {b64(m.getTopic()), m.getQueueId(), m.getQueueOffset(), m.getCommitLogOffset(),
            m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : "", m.getMsgId(), m.getFlag(), m.getSysFlag(),
            m.getBornTimestamp(), host(m.getBornHost()), m.getStoreTimestamp(), host(m.getStoreHost()),
            m.getReconsumeTimes(), m.getPreparedTransactionOffset(),
            Base64.getEncoder().encodeToString(m.getBody() == null ? new byte[0] : m.getBody())};
        for (Object o : fields) {
            b.append('\t').append(o);
        }
        Map<String, String> props = new TreeMap<>(m.getProperties());
        for (Map.Entry<String, String> e : props.entrySet()) {
            b.append('\t').append(b64(e.getKey())).append(':').append(b64(e.getValue()));
        }
        return b.toString();
    }
}
