package org.rocketlake.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * Errors for a store whose bytes contradict what the reader was told (storelib.errors.CorruptStore):
 * the message names the file and the position, like verify's report. A JDK exception type, so
 * that the driver can read a task's failure without this jar on its own class path.
 *
 * A missing file is damage only when no expiry committed after the planned batch deleted it: the
 * task cannot tell (that needs the manifest's history), so its error ends with {@link #MISSING}
 * and what the driver needs to tell it (the store, the file, the batch the plan is of), and the
 * driver says which it is (storelib.read.jvmsource).
 */
final class Corrupt {
    static final String MISSING = "rocketlake-missing ";

    private Corrupt() {
    }

    static IllegalStateException at(String rel, long position, String what) {
        return new IllegalStateException("CorruptStore: " + rel + "@" + position + ": " + what);
    }

    /** A file (or an object of it) of the plan that is not there. */
    static IllegalStateException missing(String rel, String what) {
        return new Missing("CorruptStore: " + rel + "@0: " + what, rel);
    }

    /** {@code e}, when it is a missing file's, with the store and the plan's batch named (one line
     *  after its message); any other error as it is. */
    static RuntimeException named(RuntimeException e, String store, String batch) {
        if (!(e instanceof Missing)) {
            return e;
        }
        ObjectNode mark = new ObjectMapper().createObjectNode();
        mark.put("store", store);
        mark.put("rel", ((Missing) e).rel);
        try {
            mark.set("batch", batch == null ? null : new ObjectMapper().readTree(batch));
        } catch (java.io.IOException bad) {
            mark.set("batch", null);     // (the plan's own JSON: cannot happen) no batch, no explanation
        }
        // not caused by e: the driver reads the failure without this jar's classes (its stack kept)
        IllegalStateException out = new IllegalStateException(e.getMessage() + "\n" + MISSING + mark);
        out.setStackTrace(e.getStackTrace());
        return out;
    }

    /** Thrown and caught inside a task only ({@link #named} replaces it by a JDK type). */
    private static final class Missing extends IllegalStateException {
        private static final long serialVersionUID = 1L;
        final String rel;

        Missing(String message, String rel) {
            super(message);
            this.rel = rel;
        }
    }
}
