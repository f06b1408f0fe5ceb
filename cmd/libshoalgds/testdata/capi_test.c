/* Drives libshoalgds's C ABI on the host backend, against a cluster that
 * runs mutual TLS (SHOAL_CERT, SHOAL_KEY, SHOAL_CA set by the caller):
 *   capi_test MDS PATH OST_DIRS SIZE FNV64HEX
 * reads PATH (SIZE bytes) into page-aligned memory, checks its FNV-1a
 * hash, and checks the error paths. Prints "capi: ok" on success. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "libshoalgds.h"

static uint64_t fnv(const unsigned char *p, size_t n) {
	uint64_t h = 14695981039346656037ULL;
	for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
	return h;
}

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "capi: " __VA_ARGS__); fprintf(stderr, "\n"); return 1; } } while (0)

int main(int argc, char **argv) {
	char err[1024] = "", rep[1024] = "", info[1024] = "";
	CHECK(argc == 6, "usage: capi_test MDS PATH OST_DIRS SIZE FNV64HEX");
	int64_t size = atoll(argv[4]);
	uint64_t want = strtoull(argv[5], NULL, 16);

	CHECK(shoal_gds_open(argv[1], "tpu", "", 0, err, sizeof err) < 0 && strstr(err, "backend"), "bad backend accepted: %s", err);
	/* The cluster runs mutual TLS: the certificate comes from SHOAL_CERT,
	 * SHOAL_KEY and SHOAL_CA; without one, open says so. */
	CHECK(shoal_gds_open2(argv[1], "host", "", 0, "{\"env\":{\"SHOAL_CERT\":\"\",\"SHOAL_KEY\":\"\",\"SHOAL_CA\":\"\"}}", err, sizeof err) < 0 &&
	      strstr(err, "no certificate"), "open without a certificate: %s", err);
	CHECK(shoal_gds_open2(argv[1], "host", "", 0, "{\"insecure\":true,\"cert\":\"x\"}", err, sizeof err) < 0 &&
	      strstr(err, "choose one"), "insecure and a certificate accepted: %s", err);
	int64_t h = shoal_gds_open(argv[1], "host", argv[3], 0, err, sizeof err);
	CHECK(h > 0, "open: %s", err);
	CHECK(shoal_gds_info(h, info, sizeof info, err, sizeof err) > 0 && strstr(info, "\"kind\":\"host\""), "info: %s %s", info, err);

	unsigned char *buf;
	CHECK(posix_memalign((void **)&buf, 4096, size + 4096) == 0, "no memory");
	memset(buf, 0xee, size + 4096);
	int64_t n = shoal_gds_read(h, argv[2], 0, size + 100, buf, size + 4096, rep, sizeof rep, err, sizeof err);
	CHECK(n == size, "read %lld of %lld: %s", (long long)n, (long long)size, err);
	CHECK(fnv(buf, size) == want, "hash %016llx, want %016llx", (unsigned long long)fnv(buf, size), (unsigned long long)want);
	CHECK(buf[size] == 0xee, "wrote past the end of the file");
	CHECK(strstr(rep, "\"bytes\":") && strstr(rep, "\"path\":\"host\""), "report %s", rep);

	/* A registered buffer and an offset read into its middle. */
	CHECK(shoal_gds_register(h, buf, size + 4096, err, sizeof err) == 0, "register: %s", err);
	memset(buf, 0, size + 4096);
	n = shoal_gds_read(h, argv[2], 10, 1000, buf + 4096, 1000, NULL, 0, err, sizeof err);
	CHECK(n == 1000, "offset read: %lld %s", (long long)n, err);
	CHECK(shoal_gds_unregister(h, buf, err, sizeof err) == 0, "unregister: %s", err);

	CHECK(shoal_gds_read(h, "/no/such/file", 0, 10, buf, 10, NULL, 0, err, sizeof err) < 0 && strlen(err) > 0, "missing file read");
	printf("capi: error for a missing file: %s\n", err);
	CHECK(shoal_gds_read(h, argv[2], 0, 10, buf, 5, NULL, 0, err, sizeof err) < 0, "read larger than the buffer accepted");
	char small[4];
	CHECK(shoal_gds_header(h, argv[2], small, sizeof small, err, sizeof err) < 0, "header of a non-safetensors file accepted");
	CHECK(shoal_gds_close(h, err, sizeof err) == 0, "close: %s", err);
	CHECK(shoal_gds_close(h, err, sizeof err) < 0, "double close accepted");
	free(buf);
	printf("capi: ok: %s\n", rep);
	return 0;
}
