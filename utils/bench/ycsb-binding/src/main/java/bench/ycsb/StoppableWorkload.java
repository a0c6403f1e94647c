/*
 * StoppableWorkload.java -- YCSB's CoreWorkload, unchanged, plus a way for
 * utils/bench/rebalance to end the run phase when it wants to: the harness
 * does not know in advance how long the rebalance takes, so it runs YCSB
 * with a huge operationcount and creates the file named by -p stopfile=PATH
 * when the "after" window is over. A daemon thread polls for it every
 * 100 ms and calls requestStop(), YCSB's own clean stop (the same one
 * maxexecutiontime uses): threads finish their operation, DB.cleanup()
 * runs (ack logs are closed), the final summary is printed.
 *
 * keyName(n) exposes CoreWorkload's record key naming to Load, so the
 * loader writes exactly the keys YCSB reads.
 */
package bench.ycsb;

import site.ycsb.WorkloadException;
import site.ycsb.workloads.CoreWorkload;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Properties;

public class StoppableWorkload extends CoreWorkload {
  @Override
  public void init(Properties p) throws WorkloadException {
    super.init(p);
    String stop = p.getProperty("stopfile");
    if (stop == null || stop.isEmpty()) {
      return;
    }
    Path path = Paths.get(stop);
    Thread t = new Thread(() -> {
      while (!isStopRequested()) {
        if (Files.exists(path)) {
          requestStop();
          return;
        }
        try {
          Thread.sleep(100);
        } catch (InterruptedException e) {
          return;
        }
      }
    }, "stopfile-watch");
    t.setDaemon(true);
    t.start();
  }

  public String keyName(long n) {
    return buildKeyName(n);
  }
}
