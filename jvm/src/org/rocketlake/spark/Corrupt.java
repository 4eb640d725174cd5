package org.rocketlake.spark;

/**
 * Errors for a store whose bytes contradict what the reader was told (storelib.errors.CorruptStore):
 * the message names the file and the position, like verify's report. A JDK exception type, so
 * that the driver can read a task's failure without this jar on its own class path.
 */
final class Corrupt {
    private Corrupt() {
    }

    static IllegalStateException at(String rel, long position, String what) {
        return new IllegalStateException("CorruptStore: " + rel + "@" + position + ": " + what);
    }
}
