/*
 * sizes.p4: every table size of the multicast data plane, in one place.
 *
 * These are the switch's hard limits as the P4 program declares them. The
 * controller reads the sizes back from the P4Info (table `size`), never from
 * this file, and keeps its budgets within them:
 *
 *   MCAST_TABLE_SIZE   F(v): multicast forwarding entries, one per job per
 *                      switch that forwards the job's multicast packets
 *                      (DESIGN.md section 2). A switch's configured
 *                      entry_capacity is capped at this size.
 *   G(v), the multicast groups, is not a table of this program: groups live
 *   in the packet replication engine (BMv2: any 16-bit group id but 0; Tofino:
 *   64K MGIDs). Its budget is the configured group_capacity.
 *   IPV4_LPM_SIZE      unicast routes: one /32 per host.
 *   ECMP_MEMBERS       action-selector members (one per egress port used).
 *   ECMP_MAX_GROUP_SIZE  members in one action-selector group (multi-path
 *                      ECMP; the controller's routing picks one path per
 *                      destination and uses members only, see docs/p4.md).
 *   REWRITE_TABLE_SIZE egress rewrites: one per hybrid unicast branch (job,
 *                      worker) emitted at this switch.
 *   HOST_PORTS_SIZE    host ports (the source check).
 *   SWITCH_PORTS_SIZE  ports toward another switch (not guarded).
 *   GUARD_COUNTER_SIZE the source guard's drop counter: one cell per port.
 *   KNOWN_SOURCES_SIZE (port, address, MAC) of known hosts, for IPv4 and for
 *                      ARP (known_sources, known_arp_sources).
 *   ARP_ROUTES_SIZE    ARP routes: one per host (its address).
 *   FAILOVER_TABLE_SIZE  fast-failover entries: one per protected tree edge
 *                      (job, upstream switch) (docs/p4.md, "Fast failover").
 *   PORT_CELLS         per-port registers and counters (last packet seen from
 *                      a switch port; packets sent to a backup): one cell per port.
 */
#ifndef MCAST_SIZES_P4
#define MCAST_SIZES_P4

#define MCAST_TABLE_SIZE 4096
#define IPV4_LPM_SIZE 4096
#define ECMP_MEMBERS 1024
#define ECMP_MAX_GROUP_SIZE 64
#define REWRITE_TABLE_SIZE 8192
#define HOST_PORTS_SIZE 512
#define SWITCH_PORTS_SIZE 512
#define GUARD_COUNTER_SIZE 512
#define KNOWN_SOURCES_SIZE 4096
#define ARP_ROUTES_SIZE 4096
#define FAILOVER_TABLE_SIZE 4096
#define PORT_CELLS 512

/* The clone session that copies source-check misses to the CPU port. */
#define CPU_CLONE_SESSION 100

/* The port BMv2 is started with (simple_switch_grpc --cpu-port). */
#define CPU_PORT_NUMBER 255

#endif
