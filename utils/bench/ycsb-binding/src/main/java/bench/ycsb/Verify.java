/*
 * Verify.java -- after a workload-A run, checks that every acknowledged
 * write is still in the cluster (utils/bench/rebalance: writes_acked,
 * writes_lost).
 *
 * Input: the ack logs LettuceClusterDB wrote (redis.acklog directory). For
 * every (key, field) written, the value the cluster holds now must be the
 * value of some write W (acknowledged, or failed: a failed write may still
 * have been applied) that no acknowledged write followed: no acknowledged
 * W' with start(W') > end(W) (a failed W counts as ending never). A write
 * that is followed by another acknowledged write may legitimately have been
 * overwritten; concurrent writes may land in either order.
 *
 * writes_lost counts the (key, field)s whose current value breaks that rule
 * (the value of an older write, the loader's value, or the key missing):
 * each one is at least one acknowledged write lost. writes_acked counts
 * acknowledged HSETs, fields_checked the distinct (key, field)s.
 *
 * Usage: java -cp ... bench.ycsb.Verify HOSTS ACKLOGDIR
 * Prints one JSON object on stdout, and up to 10 examples on stderr.
 */
package bench.ycsb;

import io.lettuce.core.RedisFuture;
import io.lettuce.core.cluster.api.async.RedisAdvancedClusterAsyncCommands;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

public final class Verify {
  private Verify() {
  }

  /** 64-bit FNV-1a over the UTF-16 chars of s (values are ASCII). */
  static long hash(String s) {
    long h = 0xcbf29ce484222325L;
    for (int i = 0; i < s.length(); i++) {
      h ^= s.charAt(i);
      h *= 0x100000001b3L;
    }
    return h;
  }

  private static final class W {
    final boolean acked;
    final long start;
    final long end;
    final long hash;

    W(boolean acked, long start, long end, long hash) {
      this.acked = acked;
      this.start = start;
      this.end = acked ? end : Long.MAX_VALUE;
      this.hash = hash;
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: Verify HOSTS ACKLOGDIR");
      System.exit(2);
    }
    Map<String, List<W>> writes = new HashMap<>();
    long acked = 0;
    long failed = 0;
    try (DirectoryStream<Path> ds = Files.newDirectoryStream(Paths.get(args[1]), "acks.*.log")) {
      for (Path p : ds) {
        try (BufferedReader r = Files.newBufferedReader(p)) {
          String line;
          while ((line = r.readLine()) != null) {
            String[] f = line.split(" ");
            if (f.length != 6) {
              continue; // a torn last line: the writer was killed
            }
            boolean ok = f[0].equals("A");
            writes.computeIfAbsent(f[1] + " " + f[2], k -> new ArrayList<>())
                .add(new W(ok, Long.parseLong(f[3]), Long.parseLong(f[4]),
                    Long.parseUnsignedLong(f[5], 16)));
            if (ok) {
              acked++;
            } else {
              failed++;
            }
          }
        }
      }
    } catch (IOException e) {
      System.err.println("Verify: cannot read ack logs in " + args[1] + ": " + e);
      System.exit(1);
    }

    var conn = Cluster.acquire(args[0], 30000, 1000);
    RedisAdvancedClusterAsyncCommands<String, String> redis = conn.async();
    List<String> ids = new ArrayList<>(writes.keySet());
    long lost = 0;
    int examples = 0;
    final int batch = 2000;
    for (int i = 0; i < ids.size(); i += batch) {
      int n = Math.min(batch, ids.size() - i);
      List<RedisFuture<String>> fs = new ArrayList<>(n);
      for (int j = 0; j < n; j++) {
        String[] kf = ids.get(i + j).split(" ");
        fs.add(redis.hget(kf[0], kf[1]));
      }
      for (int j = 0; j < n; j++) {
        String v = fs.get(j).get(60, TimeUnit.SECONDS);
        List<W> ws = writes.get(ids.get(i + j));
        long latestAckedStart = Long.MIN_VALUE;
        for (W w : ws) {
          if (w.acked && w.start > latestAckedStart) {
            latestAckedStart = w.start;
          }
        }
        boolean ok = false;
        if (v != null) {
          long h = hash(v);
          for (W w : ws) {
            if (w.hash == h && w.end >= latestAckedStart) {
              ok = true;
              break;
            }
          }
        }
        if (!ok && latestAckedStart != Long.MIN_VALUE) {
          lost++;
          if (examples++ < 10) {
            System.err.println("Verify: lost write to " + ids.get(i + j) + ": cluster holds "
                + (v == null ? "nothing" : "a value of no acknowledged latest write"));
          }
        }
      }
    }
    Cluster.release();
    System.out.println("{\"writes_acked\": " + acked + ", \"writes_failed\": " + failed
        + ", \"fields_checked\": " + ids.size() + ", \"writes_lost\": " + lost + "}");
  }
}
