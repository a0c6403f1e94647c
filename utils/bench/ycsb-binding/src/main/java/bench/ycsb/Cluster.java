/*
 * Cluster.java -- the one Lettuce RedisClusterClient a JVM of the rebalance
 * benchmark uses, shared by every YCSB client thread (LettuceClusterDB), the
 * loader's key check and Verify.
 *
 * Topology handling is what the benchmark is about, so it is explicit here:
 *  - every adaptive refresh trigger is on (MOVED and ASK redirects,
 *    persistent reconnects, unknown nodes), rate-limited to one refresh per
 *    adaptiveRefreshMs (default 500 ms; Lettuce's own default of 30 s
 *    would leave clients chasing MOVED for most of a short rebalance);
 *  - MOVED and ASK are followed inside Lettuce (maxRedirects), so a read of
 *    a key that is being migrated returns its value, not an error;
 *  - validateClusterNodeMembership is off: the recipient node is new, and
 *    a redirect to it may arrive before the next topology refresh knows it.
 *
 * The connection is thread-safe; YCSB's synchronous calls from N threads
 * keep up to N commands in flight on it (Lettuce pipelines them per node).
 */
package bench.ycsb;

import io.lettuce.core.RedisURI;
import io.lettuce.core.cluster.ClusterClientOptions;
import io.lettuce.core.cluster.ClusterTopologyRefreshOptions;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

final class Cluster {
  private static RedisClusterClient client;
  private static StatefulRedisClusterConnection<String, String> conn;
  private static int users;

  private Cluster() {
  }

  /** hosts: "host:port[,host:port...]" seed nodes. Reference-counted: call release() once per acquire(). */
  static synchronized StatefulRedisClusterConnection<String, String> acquire(
      String hosts, long timeoutMs, long adaptiveRefreshMs) {
    if (conn == null) {
      List<RedisURI> seeds = new ArrayList<>();
      for (String hp : hosts.split(",")) {
        String[] p = hp.trim().split(":");
        if (p.length != 2) {
          throw new IllegalArgumentException("redis.hosts: expected host:port, got '" + hp + "'");
        }
        seeds.add(RedisURI.builder().withHost(p[0]).withPort(Integer.parseInt(p[1]))
            .withTimeout(Duration.ofMillis(timeoutMs)).build());
      }
      client = RedisClusterClient.create(seeds);
      ClusterTopologyRefreshOptions refresh = ClusterTopologyRefreshOptions.builder()
          .enableAllAdaptiveRefreshTriggers()
          .adaptiveRefreshTriggersTimeout(Duration.ofMillis(adaptiveRefreshMs))
          .dynamicRefreshSources(true)
          .build();
      client.setOptions(ClusterClientOptions.builder()
          .topologyRefreshOptions(refresh)
          .maxRedirects(10)
          .validateClusterNodeMembership(false)
          .build());
      conn = client.connect();
    }
    users++;
    return conn;
  }

  static synchronized void release() {
    if (--users > 0 || conn == null) {
      return;
    }
    conn.close();
    client.shutdown(Duration.ZERO, Duration.ofSeconds(2));
    conn = null;
    client = null;
  }
}
