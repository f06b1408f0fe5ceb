/* Stands in for librt on glibc older than 2.34: the fake libcufile built
 * with -DFAKE_NEEDS_RT calls this without linking it, so it loads only
 * after this library was loaded with RTLD_GLOBAL (gds preloads librt
 * before libcufile for the same reason). */
int fakert_shm_open(void) { return 0; }
