package rocketlake.refwriter;

import java.lang.reflect.Field;

/** Setting a private field of a RocketMQ object (the store's HA service). */
final class Fields {
    private Fields() {
    }

    static void set(Object target, String name, Object value) throws ReflectiveOperationException {
        for (Class<?> c = target.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                f.set(target, value);
                return;
            } catch (NoSuchFieldException e) {
                // look in the superclass
            }
        }
        throw new NoSuchFieldException(name + " in " + target.getClass());
    }
}
