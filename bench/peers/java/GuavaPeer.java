// The Java peer of bench/peers/table.py: Guava's RateLimiter (Debian's libguava-java), measured
// the way bench/memory_store_benchmark.cc measures sluice. One RateLimiter per key, a rate high
// enough that every call is admitted (a refusal ends the run with an error: the figures would
// mean nothing). tryAcquire() reads the clock (System.nanoTime, through Guava's Stopwatch) on
// every call; Guava has no public call that takes the time.
//
//   javac -cp /usr/share/java/guava.jar -d OUT GuavaPeer.java
//   java -cp /usr/share/java/guava.jar:OUT GuavaPeer [--seconds 1] [--keys 1000000] MEASURE...
//
// Measures, each printed as "name value unit":
//   hot_key_clock     one RateLimiter, tryAcquire()
//   hot_key_2threads  two threads on one RateLimiter, tryAcquire(); decisions/s in all
//   keys_clock        --keys RateLimiters in a HashMap<String, RateLimiter> made before timing,
//                     a uniform random key per call (indices drawn before timing), tryAcquire()
//   bytes_per_key     live heap (totalMemory - freeMemory after System.gc()) before and after
//                     making --keys keys of 16-17 characters and their RateLimiters (one
//                     tryAcquire() each) in a HashMap, divided by the keys
// Each throughput measure runs once for a quarter of its time first, unmeasured, so that the
// JIT has compiled the loop.

import com.google.common.util.concurrent.RateLimiter;
import java.util.HashMap;
import java.util.Map;
import java.util.function.IntPredicate;

public final class GuavaPeer {
  private static final double PER_SECOND = 1e9;
  private static final int INDICES = 1 << 22;  // pre-drawn key indices, cycled

  private GuavaPeer() {}

  private static RateLimiter newLimiter() {
    return RateLimiter.create(PER_SECOND);
  }

  // Calls step until the time is up (the clock read once per 1024 calls); decisions per second.
  private static double run(String name, double seconds, IntPredicate step) {
    long refused = 0;
    long calls = 0;
    final long start = System.nanoTime();
    final long deadline = start + (long) (seconds * 1e9);
    do {
      for (int j = 0; j < 1024; ++j) {
        if (!step.test((int) calls++)) {
          ++refused;
        }
      }
    } while (System.nanoTime() < deadline);
    final double elapsed = (System.nanoTime() - start) / 1e9;
    if (refused > 0) {
      System.err.printf("GuavaPeer: %s: %d of %d calls refused%n", name, refused, calls);
      System.exit(1);
    }
    return calls / elapsed;
  }

  private static double hotKey2Threads(double seconds) throws InterruptedException {
    final RateLimiter limiter = newLimiter();
    final double[] rates = new double[2];
    final Thread[] threads = new Thread[2];
    for (int t = 0; t < 2; ++t) {
      final int slot = t;
      threads[t] = new Thread(() -> rates[slot] = run("hot_key_2threads", seconds, i -> limiter.tryAcquire()));
      threads[t].start();
    }
    for (Thread thread : threads) {
      thread.join();
    }
    return rates[0] + rates[1];
  }

  private static double keys(double seconds, int keys) {
    final Map<String, RateLimiter> map = new HashMap<>();
    final String[] names = new String[keys];
    for (int n = 0; n < keys; ++n) {
      names[n] = "user:" + n;
      map.put(names[n], newLimiter());
    }
    final int[] idx = new int[INDICES];
    long x = 0x9E3779B97F4A7C15L;
    for (int i = 0; i < INDICES; ++i) {
      x ^= x << 13;
      x ^= x >>> 7;
      x ^= x << 17;
      idx[i] = (int) Long.remainderUnsigned(x, keys);
    }
    final IntPredicate step = i -> map.get(names[idx[i & (INDICES - 1)]]).tryAcquire();
    run("keys_clock", seconds / 4, step);
    return run("keys_clock", seconds, step);
  }

  private static long liveHeap() {
    final Runtime runtime = Runtime.getRuntime();
    for (int i = 0; i < 3; ++i) {
      System.gc();
    }
    return runtime.totalMemory() - runtime.freeMemory();
  }

  private static void bytesPerKey(int keys) {
    final long before = liveHeap();
    final Map<String, RateLimiter> map = new HashMap<>();
    for (int n = 0; n < keys; ++n) {
      final RateLimiter limiter = newLimiter();
      limiter.tryAcquire();
      map.put(String.format("client-%09d", (long) n * 7919 + 13), limiter);
    }
    final long after = liveHeap();
    System.out.printf("bytes_per_key %.1f B%n", (double) (after - before) / keys);
    if (map.size() != keys) {
      System.exit(1);
    }
  }

  public static void main(String[] args) throws InterruptedException {
    double seconds = 1;
    int keys = 1_000_000;
    int i = 0;
    for (; i < args.length && args[i].startsWith("--"); i += 2) {
      if (i + 1 >= args.length) {
        usage();
      }
      switch (args[i]) {
        case "--seconds" -> seconds = Double.parseDouble(args[i + 1]);
        case "--keys" -> keys = Integer.parseInt(args[i + 1]);
        default -> usage();
      }
    }
    if (i == args.length || seconds <= 0 || keys <= 0) {
      usage();
    }
    for (; i < args.length; ++i) {
      final double s = seconds;
      switch (args[i]) {
        case "hot_key_clock" -> {
          final RateLimiter limiter = newLimiter();
          run(args[i], s / 4, n -> limiter.tryAcquire());
          print(args[i], run(args[i], s, n -> limiter.tryAcquire()));
        }
        case "hot_key_2threads" -> {
          hotKey2Threads(s / 4);
          print(args[i], hotKey2Threads(s));
        }
        case "keys_clock" -> print(args[i], keys(s, keys));
        case "bytes_per_key" -> bytesPerKey(keys);
        default -> {
          System.err.println("GuavaPeer: unknown measure " + args[i]);
          System.exit(2);
        }
      }
    }
  }

  private static void print(String name, double perSecond) {
    System.out.printf("%s %.0f decisions/s%n", name, perSecond);
  }

  private static void usage() {
    System.err.println("usage: GuavaPeer [--seconds S] [--keys N] MEASURE...");
    System.exit(2);
  }
}
