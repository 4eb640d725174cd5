package rocketlake.brokercheck;

import java.lang.reflect.Method;

/** MessageStoreConfig setters by key name (the store's file sizes must be the store's). */
final class Config {
    private Config() {
    }

    static void set(Object cfg, String key, String value) throws Exception {
        String setter = "set" + Character.toUpperCase(key.charAt(0)) + key.substring(1);
        for (Method m : cfg.getClass().getMethods()) {
            if (!m.getName().equals(setter) || m.getParameterCount() != 1) {
                continue;
            }
            Class<?> t = m.getParameterTypes()[0];
            if (t == int.class) {
                m.invoke(cfg, Integer.parseInt(value));
            } else if (t == long.class) {
                m.invoke(cfg, Long.parseLong(value));
            } else if (t == boolean.class) {
                m.invoke(cfg, Boolean.parseBoolean(value));
            } else if (t == String.class) {
                m.invoke(cfg, value);
            } else {
                continue;
            }
            return;
        }
        throw new IllegalArgumentException("no setter for " + key);
    }
}
