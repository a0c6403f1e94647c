/*
 * Load.java -- writes the benchmark's data set as Redis protocol, one
 * stream per master, for `redis-cli --pipe` (utils/bench/rebalance runs
 * one redis-cli --pipe per master, reading from a FIFO this writes to).
 * Much faster than YCSB's load phase (no round trip per record) and
 * without a client-side CPU bottleneck on a 2-core machine.
 *
 * The records are exactly the ones YCSB's CoreWorkload inserts and then
 * reads: keys from CoreWorkload's own key naming (StoppableWorkload
 * .keyName, "user" + FNV hash of the record number), each a hash of
 * field0..field<F-1> with values of L bytes. Every key goes to the master
 * owning its hash slot (CRC16, Lettuce's SlotHash), like utils/demo/load.tcl.
 *
 * Usage: java -cp ... bench.ycsb.Load RECORDS FIELDS FIELDLEN PATH=RANGES...
 *   RANGES: slot ranges owned by the master fed through PATH, e.g.
 *           /tmp/x/40100.fifo=0-5460 (several: 0-10,20-30)
 * Prints "loaded-keys <path> <n>" per output on stdout when done.
 */
package bench.ycsb;

import io.lettuce.core.cluster.SlotHash;
import site.ycsb.measurements.Measurements;

import java.io.BufferedOutputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Properties;

public final class Load {
  private Load() {
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 4) {
      System.err.println("usage: Load RECORDS FIELDS FIELDLEN PATH=START-END[,START-END...]...");
      System.exit(2);
    }
    long records = Long.parseLong(args[0]);
    int fields = Integer.parseInt(args[1]);
    int fieldLen = Integer.parseInt(args[2]);
    int nout = args.length - 3;
    OutputStream[] outs = new OutputStream[nout];
    String[] paths = new String[nout];
    long[] counts = new long[nout];
    int[] owner = new int[SlotHash.SLOT_COUNT];
    java.util.Arrays.fill(owner, -1);
    for (int i = 0; i < nout; i++) {
      String[] pr = args[3 + i].split("=", 2);
      paths[i] = pr[0];
      for (String r : pr[1].split(",")) {
        String[] ab = r.split("-");
        int a = Integer.parseInt(ab[0]);
        int b = ab.length > 1 ? Integer.parseInt(ab[1]) : a;
        for (int s = a; s <= b; s++) {
          owner[s] = i;
        }
      }
    }
    for (int i = 0; i < nout; i++) {
      outs[i] = new BufferedOutputStream(new FileOutputStream(paths[i]), 1 << 20);
    }

    Properties p = new Properties();
    p.setProperty("recordcount", Long.toString(records));
    p.setProperty("fieldcount", Integer.toString(fields));
    Measurements.setProperties(p); // CoreWorkload's constructor needs it
    StoppableWorkload w = new StoppableWorkload();
    w.init(p);

    // The field part of every HSET is the same bytes; build it once.
    byte[] value = new byte[fieldLen];
    for (int i = 0; i < fieldLen; i++) {
      value[i] = (byte) ('a' + (i * 7) % 26);
    }
    StringBuilder sb = new StringBuilder();
    for (int f = 0; f < fields; f++) {
      String name = "field" + f;
      sb.append('$').append(name.length()).append("\r\n").append(name).append("\r\n");
      sb.append('$').append(fieldLen).append("\r\n").append(new String(value, StandardCharsets.US_ASCII))
          .append("\r\n");
    }
    byte[] tail = sb.toString().getBytes(StandardCharsets.US_ASCII);
    byte[] head = ("*" + (2 + 2 * fields) + "\r\n$4\r\nHSET\r\n").getBytes(StandardCharsets.US_ASCII);

    for (long n = 0; n < records; n++) {
      String key = w.keyName(n);
      int o = owner[SlotHash.getSlot(key)];
      if (o < 0) {
        throw new IOException("slot of " + key + " has no owner in the ranges given");
      }
      OutputStream out = outs[o];
      out.write(head);
      out.write(('$' + Integer.toString(key.length()) + "\r\n" + key + "\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(tail);
      counts[o]++;
    }
    for (int i = 0; i < nout; i++) {
      outs[i].close();
      System.out.println("loaded-keys " + paths[i] + " " + counts[i]);
    }
  }
}
