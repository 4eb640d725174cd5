package org.rocketlake.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.LinkedHashSet;
import java.util.Set;

/**
 * Inclusive bounds on store time and record start, and a topic set: the reader applies them
 * exactly (records outside are never decoded), so Spark need not filter again.
 */
final class Bounds implements Serializable {
    private static final long serialVersionUID = 1L;

    Long beginTs;
    Long endTs;
    Long lo;
    Long hi;
    Set<String> topics;        // null: every topic
    QueueFloors floors = QueueFloors.NONE;     // records below their queue's minimum offset: left out

    Bounds copy() {
        Bounds b = new Bounds();
        b.beginTs = beginTs;
        b.endTs = endTs;
        b.lo = lo;
        b.hi = hi;
        b.topics = topics == null ? null : new LinkedHashSet<>(topics);
        b.floors = floors;
        return b;
    }

    void lowerTime(Long v) {
        beginTs = atLeast(beginTs, v);
    }

    void upperTime(Long v) {
        endTs = atMost(endTs, v);
    }

    void lowerOffset(Long v) {
        lo = atLeast(lo, v);
    }

    void upperOffset(Long v) {
        hi = atMost(hi, v);
    }

    /** A lower bound raised to {@code v} (null: no bound; a null {@code v} leaves it). */
    private static Long atLeast(Long bound, Long v) {
        return v == null ? bound : bound == null ? v : Long.valueOf(Math.max(bound, v));
    }

    /** An upper bound lowered to {@code v} (null: no bound; a null {@code v} leaves it). */
    private static Long atMost(Long bound, Long v) {
        return v == null ? bound : bound == null ? v : Long.valueOf(Math.min(bound, v));
    }

    void topicIn(Collection<String> values) {
        Set<String> s = new LinkedHashSet<>(values);
        if (topics != null) {
            s.retainAll(topics);
        }
        topics = s;
    }

    boolean empty() {
        return (topics != null && topics.isEmpty()) || (beginTs != null && endTs != null && beginTs > endTs)
            || (lo != null && hi != null && lo > hi);
    }

    /** The topics as UTF-8 bytes (what records store), or null for every topic. */
    byte[][] topicBytes() {
        if (topics == null) {
            return null;
        }
        byte[][] out = new byte[topics.size()][];
        int i = 0;
        for (String t : topics) {
            out[i++] = t.getBytes(StandardCharsets.UTF_8);
        }
        return out;
    }

    /** Whether a split may hold records inside the bounds (its offsets, its segment's time range). */
    boolean mayHold(Plan.Split s) {
        if (empty()) {
            return false;
        }
        if ((lo != null && s.stop <= lo) || (hi != null && s.start > hi)) {
            return false;
        }
        if (s.minTs != null && s.maxTs != null) {
            return !((beginTs != null && s.maxTs < beginTs) || (endTs != null && s.minTs > endTs));
        }
        return true;
    }

    @Override
    public String toString() {
        return "store_timestamp in [" + beginTs + ", " + endTs + "], commitlog_offset in [" + lo + ", " + hi
            + "], topic in " + topics;
    }
}
