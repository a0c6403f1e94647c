/*
 * LettuceClusterDB.java -- a YCSB DB binding for Redis Cluster on Lettuce,
 * written for utils/bench/rebalance (YCSB's own Redis binding is not on
 * Maven Central, uses Jedis 2.9, and writes an "_indices" key on every
 * insert: one hot slot, which would distort a rebalance benchmark).
 *
 * Records are stored as the stock binding stores them: one hash per record,
 * key = YCSB's key ("user<hash>"), fields field0..field9. No index key;
 * scan() is not supported (workloads A and C do not scan).
 *
 * Properties (-p on the YCSB command line):
 *   redis.hosts          seed nodes, host:port[,host:port...] (required)
 *   redis.timeout        command timeout in ms (default 10000)
 *   redis.refresh        minimum ms between adaptive topology refreshes
 *                        (default 500)
 *   redis.acklog         a directory: when set, every update and insert is
 *                        logged, one file per client thread, for Verify:
 *                          A <key> <field> <start_ns> <end_ns> <hash>   acknowledged
 *                          F <key> <field> <start_ns> <end_ns> <hash>   failed (may
 *                                                                       still have applied)
 *                        hash = Verify.hash(value) (64-bit FNV-1a, hex). The
 *                        times are System.nanoTime() of this JVM.
 *
 * A failed command (timeout, connection error, CLUSTERDOWN, too many
 * redirects...) returns Status.ERROR, which YCSB counts as <OP>-FAILED in
 * its status lines; a read of a missing record returns NOT_FOUND (also
 * counted as failed: every record the benchmark reads was loaded).
 */
package bench.ycsb;

import io.lettuce.core.KeyValue;
import io.lettuce.core.cluster.api.sync.RedisAdvancedClusterCommands;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.Vector;
import java.util.concurrent.atomic.AtomicInteger;

public class LettuceClusterDB extends DB {
  private static final AtomicInteger THREADS = new AtomicInteger();

  private RedisAdvancedClusterCommands<String, String> redis;
  private BufferedWriter acklog;

  @Override
  public void init() throws DBException {
    String hosts = getProperties().getProperty("redis.hosts");
    if (hosts == null || hosts.isEmpty()) {
      throw new DBException("LettuceClusterDB: -p redis.hosts=host:port[,...] is required");
    }
    long timeout = Long.parseLong(getProperties().getProperty("redis.timeout", "10000"));
    long refresh = Long.parseLong(getProperties().getProperty("redis.refresh", "500"));
    try {
      redis = Cluster.acquire(hosts, timeout, refresh).sync();
    } catch (RuntimeException e) {
      throw new DBException("LettuceClusterDB: cannot connect to " + hosts + ": " + e, e);
    }
    String dir = getProperties().getProperty("redis.acklog");
    if (dir != null && !dir.isEmpty()) {
      Path p = Paths.get(dir, "acks." + THREADS.getAndIncrement() + ".log");
      try {
        Files.createDirectories(p.getParent());
        acklog = Files.newBufferedWriter(p, StandardCharsets.UTF_8);
      } catch (IOException e) {
        throw new DBException("LettuceClusterDB: cannot write " + p + ": " + e, e);
      }
    }
  }

  @Override
  public void cleanup() throws DBException {
    try {
      if (acklog != null) {
        acklog.close();
      }
    } catch (IOException e) {
      throw new DBException("LettuceClusterDB: closing the ack log: " + e, e);
    } finally {
      Cluster.release();
    }
  }

  @Override
  public Status read(String table, String key, Set<String> fields, Map<String, ByteIterator> result) {
    try {
      if (fields == null) {
        Map<String, String> all = redis.hgetall(key);
        if (all.isEmpty()) {
          return Status.NOT_FOUND;
        }
        StringByteIterator.putAllAsByteIterators(result, all);
      } else {
        List<KeyValue<String, String>> kvs = redis.hmget(key, fields.toArray(new String[0]));
        boolean any = false;
        for (KeyValue<String, String> kv : kvs) {
          if (kv.hasValue()) {
            result.put(kv.getKey(), new StringByteIterator(kv.getValue()));
            any = true;
          }
        }
        if (!any) {
          return Status.NOT_FOUND;
        }
      }
      return Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
                     Vector<HashMap<String, ByteIterator>> result) {
    return Status.NOT_IMPLEMENTED;
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    return write(key, values);
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    return write(key, values);
  }

  @Override
  public Status delete(String table, String key) {
    try {
      redis.del(key);
      return Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  private Status write(String key, Map<String, ByteIterator> values) {
    Map<String, String> m = StringByteIterator.getStringMap(values);
    long start = System.nanoTime();
    Status st;
    try {
      redis.hset(key, m);
      st = Status.OK;
    } catch (RuntimeException e) {
      st = Status.ERROR;
    }
    long end = System.nanoTime();
    if (acklog != null) {
      char tag = st.isOk() ? 'A' : 'F';
      try {
        for (Map.Entry<String, String> e : m.entrySet()) {
          acklog.write(tag + " " + key + " " + e.getKey() + " " + start + " " + end + " "
              + Long.toHexString(Verify.hash(e.getValue())) + "\n");
        }
      } catch (IOException e) {
        return Status.ERROR;
      }
    }
    return st;
  }
}
