/*
 * tna/sizes.p4: every table size and constant of the Tofino data plane
 * (p4src/tna/mcast.p4), in one place, for both chips: Tofino 1 (TNA) and
 * Tofino 2 (T2NA). bf-p4c defines __TARGET_TOFINO__ (1 or 2) from --target.
 *
 * As for BMv2 (p4src/sizes.p4), the controller reads the sizes back from the
 * P4Info (table `size`), never from this file. The sizes were found by
 * compiling (docs/p4.md, "Tofino"): MCAST_TABLE_SIZE, F(v), is the largest
 * multiple of 1024 entries that still fits next to the other tables, found
 * by compiling with -DMCAST_TABLE_SIZE=N; the next step runs out of stages.
 *
 *   MCAST_TABLE_SIZE     F(v): multicast entries (one per job per switch),
 *                        each with a direct meter and a direct counter.
 *   G(v) lives in the PRE: 64K multicast group ids (MGIDs) on both chips.
 *   IPV4_LPM_SIZE        unicast routes (one /32 per host).
 *   ECMP_MEMBERS, ECMP_MAX_GROUP_SIZE, ECMP_GROUPS: the action selector.
 *   REWRITE_TABLE_SIZE   egress rewrites (one per hybrid unicast branch).
 *   HOST_PORTS_SIZE, SWITCH_PORTS_SIZE, KNOWN_SOURCES_SIZE, ARP_ROUTES_SIZE: the source check
 *   GUARD_COUNTER_SIZE: the source guard's drop counter, one cell per port
 *                        and ARP, as in p4src/sizes.p4.
 */
#ifndef MCAST_TNA_SIZES_P4
#define MCAST_TNA_SIZES_P4

#ifndef MCAST_TABLE_SIZE  /* -DMCAST_TABLE_SIZE=N: how the size was searched */
#if __TARGET_TOFINO__ == 2
#define MCAST_TABLE_SIZE 277504  /* 271K: 278528 (272K) needs 21 of 20 stages with the source guard */
#else
#define MCAST_TABLE_SIZE 139264  /* 136K: 140288 (137K) needs 13 of 12 stages */
#endif
#endif
#define IPV4_LPM_SIZE 4096
#define ECMP_MEMBERS 1024
#define ECMP_MAX_GROUP_SIZE 64
#define ECMP_GROUPS 1024
#define REWRITE_TABLE_SIZE 8192
#define HOST_PORTS_SIZE 512
#define SWITCH_PORTS_SIZE 512
#define GUARD_COUNTER_SIZE 512
#define KNOWN_SOURCES_SIZE 4096
#define ARP_ROUTES_SIZE 4096

/* The mirror session that copies source-check misses to the CPU port (a
 * P4Runtime CloneSessionEntry, as on BMv2; Tofino mirror ids are 10 bits). */
#define CPU_CLONE_SESSION 100

/* The PCIe CPU port: 192 on a 2-pipe Tofino 1 (e.g. 32 x 100G; 320 on a
 * 4-pipe one: compile with -DCPU_PORT_NUMBER=320), 0 on Tofino 2. */
#ifndef CPU_PORT_NUMBER
#if __TARGET_TOFINO__ == 2
#define CPU_PORT_NUMBER 0
#else
#define CPU_PORT_NUMBER 192
#endif
#endif

#endif
