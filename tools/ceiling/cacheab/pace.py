import os, sys, mmap, time
path, rate = sys.argv[1], float(sys.argv[2])  # MiB/s
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
buf = mmap.mmap(-1, 1 << 20); buf.write(os.urandom(1 << 20))
t0 = time.monotonic(); n = 0
while n < 4096:
    os.pwrite(fd, buf, n << 20); n += 1
    ahead = n / rate - (time.monotonic() - t0)
    if ahead > 0: time.sleep(ahead)
