package rocketlake.brokercheck;

/** A private field of a RocketMQ object by name (the client factory the pull consumer hides). */
final class Reflect {
    private Reflect() {
    }

    static Object field(Object target, String name) throws ReflectiveOperationException {
        for (Class<?> c = target.getClass(); c != null; c = c.getSuperclass()) {
            try {
                java.lang.reflect.Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(target);
            } catch (NoSuchFieldException e) {
                // the superclass
            }
        }
        throw new NoSuchFieldException(name);
    }
}
