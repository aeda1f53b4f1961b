/*
 * mcast.p4: the multicast data plane of the controller (DESIGN.md section 5),
 * P4_16 for the v1model architecture (BMv2 simple_switch_grpc).
 *
 * Ingress
 *   - A packet from the CPU port carries a packet_out header: it goes out of
 *     the port the controller names, untouched by any table (LLDP probes,
 *     ARP replies).
 *   - LLDP goes to the CPU port with a packet_in header naming the ingress
 *     port (link discovery), under the packet-in meter.
 *   - ARP: from a port not toward a switch, a known host's ARP (table `known_arp_sources`:
 *     port, sender address, source MAC) is routed to its target by table
 *     `arp_routes` (exact on the target address) and, under the packet-in
 *     meter, cloned to the CPU (the controller learns and answers too); ARP
 *     from another switch is routed the same way. Anything else (an unknown
 *     host, an unknown target) goes to the CPU alone, as before (proxy ARP).
 *     So ARP between known hosts works while the controller is down.
 *   - The source guard (IPv4): a packet from a port that does not lead to
 *     another switch (table `switch_ports`: an edge port, or one the
 *     controller has not classified yet) whose (port, source address, source
 *     MAC) is not a known host's (table `known_sources`) is NOT forwarded: it
 *     goes to the CPU alone, under the packet-in meter (the controller learns
 *     new hosts from it), and is counted in `source_guard_drops` (indexed by
 *     the ingress port). Packets from other switches are not checked again.
 *     ARP from such a port that is not a known host's goes to the CPU alone
 *     and is counted the same way.
 *   - IPv4 to a multicast address: table `multicast`, keyed on the ingress
 *     port and the IPv4 destination (the job's group address; the ingress
 *     port is the port toward the job's tree parent, as in the OpenFlow
 *     translation, so a packet arriving anywhere else is dropped). Its actions
 *     hand the packet to a multicast group of the packet replication engine
 *     (standard_metadata.mcast_grp), send it to a single egress port, or
 *     rewrite it into one unicast copy (a non-replicating switch that emits a
 *     single hybrid branch). A miss drops. One entry per job per switch: the
 *     table size is F(v). Its direct counter counts each job's packets and
 *     bytes; its direct meter, configured only on the entry at the PS's edge
 *     switch, drops what exceeds the job's planned rate (red).
 *   - Fast failover (docs/p4.md, "Fast failover"): every packet from a port
 *     toward another switch stamps register `port_seen[port]` with its arrival
 *     time (the controller sends a heartbeat frame, ethertype 0x88B5, out of
 *     the far end of every link that protects a tree edge; the switch drops
 *     it). A job whose edge has a backup has an entry in `multicast_failover`
 *     (same key as `multicast`) naming the watched port, a timeout and the
 *     backup (a multicast group, or one egress port); when nothing was seen on
 *     the watched port for longer than the timeout, the switch itself sends
 *     the packet to the backup and counts it in `failover_packets[watched
 *     port]`. A port never seen (cell 0) is not judged: the re-plan repairs.
 *     The first backup packet after the port was last heard is also reported
 *     to the controller: a CPU copy turned into a heartbeat frame (ethertype
 *     0x88B5) whose source MAC is how long the port had been silent, in
 *     microseconds (P4Runtime on BMv2 cannot read registers).
 *   - Other IPv4: table `ipv4_lpm`, longest prefix match on the destination,
 *     implemented by the action selector `ecmp_selector` (members name an
 *     egress port). A miss drops.
 * Egress
 *   - A replica of a multicast group carries its replica id (egress_rid, the
 *     `instance` of the replica). Table `replica_rewrite`, keyed on it,
 *     rewrites a replica into a unicast copy for a hybrid branch (IPv4 and
 *     Ethernet destination of the worker; the UDP checksum is zeroed, which
 *     IPv4 allows, so no payload checksum is needed). A plain replica (no
 *     rewrite) is never sent back out of its ingress port; a rewritten copy
 *     may be, when the unicast route to its worker goes back that way (the
 *     OpenFlow translation's OFPP_IN_PORT case).
 *
 * The same pipeline for Tofino: p4src/tna/mcast.p4 (docs/p4.md, "Tofino").
 */
#include <core.p4>
#include <v1model.p4>
#include "sizes.p4"

const bit<9> CPU_PORT = CPU_PORT_NUMBER;
const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_ARP = 0x0806;
const bit<16> ETHERTYPE_LLDP = 0x88cc;
const bit<16> ETHERTYPE_HEARTBEAT = 0x88b5;  // IEEE local experimental: the fast-failover heartbeat
const bit<8> IP_PROTO_UDP = 17;
const bit<32> PKT_INSTANCE_TYPE_INGRESS_CLONE = 1;
const bit<32> PKT_INSTANCE_TYPE_REPLICATION = 5;
const bit<2> METER_RED = 2;  // v1model colours: 0 green, 1 yellow, 2 red

typedef bit<9> port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

@controller_header("packet_in")
header packet_in_h {
    port_t ingress_port;
    bit<7> _pad;
}

@controller_header("packet_out")
header packet_out_h {
    port_t egress_port;
    bit<7> _pad;
}

header ethernet_h {
    mac_t dstAddr;
    mac_t srcAddr;
    bit<16> etherType;
}

header ipv4_h {
    bit<4> version;
    bit<4> ihl;
    bit<8> diffserv;
    bit<16> totalLen;
    bit<16> identification;
    bit<3> flags;
    bit<13> fragOffset;
    bit<8> ttl;
    bit<8> protocol;
    bit<16> hdrChecksum;
    ipv4_addr_t srcAddr;
    ipv4_addr_t dstAddr;
}

header arp_h {
    bit<16> htype;
    bit<16> ptype;
    bit<8> hlen;
    bit<8> plen;
    bit<16> oper;
    mac_t sha;
    ipv4_addr_t spa;
    mac_t tha;
    ipv4_addr_t tpa;
}

header udp_h {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

struct headers_t {
    packet_out_h packet_out;
    packet_in_h packet_in;
    ethernet_h ethernet;
    arp_h arp;
    ipv4_h ipv4;
    udp_h udp;
}

struct metadata_t {
    // the ingress port, carried to the CPU copy of a source-check miss (an
    // ingress-to-egress clone keeps only the fields of field list 1)
    @field_list(1)
    port_t copy_ingress_port;
    // a fast-failover report (the first packet a backup carried after the watched
    // port fell silent): how long the port had been silent then, microseconds
    @field_list(1)
    bit<48> ff_report_gap;
    bit<2> job_color;  // the job meter's colour (multicast table, direct meter)
    bit<2> cpu_color;  // the packet-in meter's colour
    // the fast-failover entry of the job (multicast_failover), if any
    port_t ff_watch;
    bit<48> ff_timeout;
    bit<16> ff_group;
    port_t ff_port;
}

parser McastParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out {
        pkt.extract(hdr.packet_out);
        transition parse_ethernet;
    }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_ARP: parse_arp;
            default: accept;
        }
    }
    state parse_arp {
        pkt.extract(hdr.arp);
        transition accept;
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) {
            IP_PROTO_UDP: parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition accept;
    }
}

control McastVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control McastIngress(inout headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {
    // per job: packets and bytes of every multicast entry; the PS-edge entry's
    // meter polices the job to its planned rate (unconfigured: all green)
    direct_counter(CounterType.packets_and_bytes) job_counter;
    direct_meter<bit<2>>(MeterType.bytes) job_meter;
    // one meter caps everything sent to the CPU port (index 0; unconfigured: no cap)
    meter(1, MeterType.packets) packet_in_meter;
    // the source guard's refusals, per ingress port (packets not forwarded)
    counter(GUARD_COUNTER_SIZE, CounterType.packets) source_guard_drops;

    // fast failover: when a packet last came in from each port toward a switch
    // (ingress_global_timestamp, microseconds on BMv2; 0: never), and the packets
    // sent to a backup because the watched port was silent
    register<bit<48>>(PORT_CELLS) port_seen;
    counter(PORT_CELLS, CounterType.packets) failover_packets;
    // when the watched port's current failover began (its first backup packet)
    register<bit<48>>(PORT_CELLS) failover_since;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action mcast_drop() {
        job_meter.read(meta.job_color);
        mark_to_drop(standard_metadata);
    }

    action set_mcast_group(bit<16> group) {
        job_meter.read(meta.job_color);
        standard_metadata.mcast_grp = group;
    }

    action set_egress_port(port_t port) {
        standard_metadata.egress_spec = port;
    }

    action mcast_egress_port(port_t port) {
        job_meter.read(meta.job_color);
        standard_metadata.egress_spec = port;
    }

    action unicast_copy(port_t port, ipv4_addr_t ipv4_dst, mac_t eth_dst) {
        job_meter.read(meta.job_color);
        hdr.ipv4.dstAddr = ipv4_dst;
        hdr.ethernet.dstAddr = eth_dst;
        if (hdr.udp.isValid()) {
            hdr.udp.checksum = 0;
        }
        standard_metadata.egress_spec = port;
    }

    table multicast {
        key = {
            standard_metadata.ingress_port: exact;
            hdr.ipv4.dstAddr: exact;
        }
        actions = {
            set_mcast_group;
            mcast_egress_port;
            unicast_copy;
            mcast_drop;
        }
        default_action = mcast_drop();
        counters = job_counter;
        meters = job_meter;
        size = MCAST_TABLE_SIZE;
    }

    // fast failover of a protected tree edge: the port to watch, how long it may
    // stay silent (microseconds), and the backup: a multicast group (the job's
    // group with the watched port's replica moved to the detour) or one port
    action failover_to_group(port_t watch, bit<48> timeout, bit<16> group) {
        meta.ff_watch = watch;
        meta.ff_timeout = timeout;
        meta.ff_group = group;
    }

    action failover_to_port(port_t watch, bit<48> timeout, port_t port) {
        meta.ff_watch = watch;
        meta.ff_timeout = timeout;
        meta.ff_group = 0;
        meta.ff_port = port;
    }

    table multicast_failover {
        key = {
            standard_metadata.ingress_port: exact;
            hdr.ipv4.dstAddr: exact;
        }
        actions = {
            failover_to_group;
            failover_to_port;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = FAILOVER_TABLE_SIZE;
    }

    // the source guard (the OpenFlow pipeline's table 0): IPv4 from a port not
    // toward a switch whose (port, source address, source MAC) is a known host's
    // passes; any other goes to the CPU alone and is counted, never forwarded.
    // host_ports lists the edge ports the controller knows (its action notes the
    // ingress port, as apply does for every packet)
    action copy_to_cpu() {
        meta.copy_ingress_port = standard_metadata.ingress_port;
    }

    table host_ports {
        key = {
            standard_metadata.ingress_port: exact;
        }
        actions = {
            copy_to_cpu;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = HOST_PORTS_SIZE;
    }

    action known_source() {
    }

    // ports toward another switch: their packets were admitted at their edge switch
    action transit() {
    }

    table switch_ports {
        key = {
            standard_metadata.ingress_port: exact;
        }
        actions = {
            transit;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = SWITCH_PORTS_SIZE;
    }

    table known_sources {
        key = {
            standard_metadata.ingress_port: exact;
            hdr.ipv4.srcAddr: exact;
            hdr.ethernet.srcAddr: exact;
        }
        actions = {
            known_source;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = KNOWN_SOURCES_SIZE;
    }

    // ARP between known hosts stays in the data plane: a known host's ARP (its
    // port, sender address and MAC) and ARP from another switch are routed to
    // their target by its address
    table known_arp_sources {
        key = {
            standard_metadata.ingress_port: exact;
            hdr.arp.spa: exact;
            hdr.ethernet.srcAddr: exact;
        }
        actions = {
            known_source;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = KNOWN_SOURCES_SIZE;
    }

    table arp_routes {
        key = {
            hdr.arp.tpa: exact;
        }
        actions = {
            set_egress_port;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = ARP_ROUTES_SIZE;
    }

    action to_cpu() {
        standard_metadata.egress_spec = CPU_PORT;
        hdr.packet_in.setValid();
        hdr.packet_in.ingress_port = standard_metadata.ingress_port;
        hdr.packet_in._pad = 0;
    }

    @max_group_size(ECMP_MAX_GROUP_SIZE)
    action_selector(HashAlgorithm.crc16, ECMP_MEMBERS, 14) ecmp_selector;

    table ipv4_lpm {
        key = {
            hdr.ipv4.dstAddr: lpm;
            hdr.ipv4.srcAddr: selector;
            hdr.ipv4.protocol: selector;
        }
        actions = {
            set_egress_port;
        }
        implementation = ecmp_selector;
        size = IPV4_LPM_SIZE;
    }

    apply {
        if (hdr.packet_out.isValid()) {
            // from the controller: out of the port it names, nothing else
            standard_metadata.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
            exit;
        }
        if (hdr.ethernet.etherType == ETHERTYPE_LLDP) {
            packet_in_meter.execute_meter<bit<2>>(0, meta.cpu_color);
            if (meta.cpu_color == METER_RED) {
                drop();  // over the packet-in cap
                exit;
            }
            to_cpu();
            exit;
        }
        // a host port (its action notes the ingress port for a CPU copy); a
        // port toward another switch; or neither (not classified yet): guarded too
        host_ports.apply();
        meta.copy_ingress_port = standard_metadata.ingress_port;
        bool from_switch = switch_ports.apply().hit;
        if (from_switch) {
            // the port is alive: fast failover watches this (any packet counts)
            port_seen.write((bit<32>)standard_metadata.ingress_port, standard_metadata.ingress_global_timestamp);
        }
        if (hdr.ethernet.etherType == ETHERTYPE_HEARTBEAT) {
            drop();  // seen; never forwarded
            exit;
        }
        if (hdr.arp.isValid()) {
            bool admitted = from_switch;
            if (!from_switch) {
                admitted = known_arp_sources.apply().hit;
            }
            bool routed = false;
            if (admitted) {
                routed = arp_routes.apply().hit;
            }
            packet_in_meter.execute_meter<bit<2>>(0, meta.cpu_color);
            if (routed) {
                if (!from_switch && meta.cpu_color != METER_RED) {
                    clone_preserving_field_list(CloneType.I2E, CPU_CLONE_SESSION, 1);
                }
                if (standard_metadata.egress_spec == standard_metadata.ingress_port) {
                    drop();  // a route never reflects a packet
                }
                exit;
            }
            if (!admitted) {
                // the guard: not a known host's ARP at this port, never routed
                source_guard_drops.count((bit<32>)standard_metadata.ingress_port);
            }
            if (meta.cpu_color == METER_RED) {
                drop();  // over the packet-in cap
                exit;
            }
            to_cpu();  // an unknown host or target: the controller learns and answers
            exit;
        }
        if (!hdr.ipv4.isValid()) {
            drop();
            exit;
        }
        if (!from_switch) {
            if (!known_sources.apply().hit) {
                // the guard: not a known host's source at this port: to the CPU
                // alone (under the cap, so the controller can learn a new host),
                // never forwarded
                source_guard_drops.count((bit<32>)standard_metadata.ingress_port);
                packet_in_meter.execute_meter<bit<2>>(0, meta.cpu_color);
                if (meta.cpu_color == METER_RED) {
                    drop();
                    exit;
                }
                to_cpu();
                exit;
            }
        }
        if (hdr.ipv4.dstAddr[31:28] == 4w0xE) {
            bool single = false;
            switch (multicast.apply().action_run) {
                mcast_egress_port: {
                    single = true;
                }
            }
            if (multicast_failover.apply().hit) {
                bit<48> seen;
                port_seen.read(seen, (bit<32>)meta.ff_watch);
                if (seen != 0 && standard_metadata.ingress_global_timestamp - seen > meta.ff_timeout) {
                    // the watched port has been silent too long: the backup, decided here
                    failover_packets.count((bit<32>)meta.ff_watch);
                    bit<48> since;
                    failover_since.read(since, (bit<32>)meta.ff_watch);
                    if (since <= seen) {
                        // the first backup packet since the port was last heard: report to the
                        // controller how long the port had been silent (under the packet-in cap)
                        failover_since.write((bit<32>)meta.ff_watch, standard_metadata.ingress_global_timestamp);
                        packet_in_meter.execute_meter<bit<2>>(0, meta.cpu_color);
                        if (meta.cpu_color != METER_RED) {
                            meta.ff_report_gap = standard_metadata.ingress_global_timestamp - seen;
                            meta.copy_ingress_port = meta.ff_watch;
                            clone_preserving_field_list(CloneType.I2E, CPU_CLONE_SESSION, 1);
                        }
                    }
                    if (meta.ff_group != 0) {
                        standard_metadata.mcast_grp = meta.ff_group;
                    } else {
                        standard_metadata.egress_spec = meta.ff_port;
                    }
                }
            }
            // a multicast copy never goes back out of its ingress port
            // (unicast_copy may: the worker's unicast route can lead back)
            if (single && standard_metadata.egress_spec == standard_metadata.ingress_port) {
                drop();
            }
            if (meta.job_color == METER_RED) {
                drop();  // over the job's planned rate (only the PS-edge entry is metered)
            }
        } else if (ipv4_lpm.apply().hit) {
            if (standard_metadata.egress_spec == standard_metadata.ingress_port) {
                drop();  // as OpenFlow does: a route never reflects a packet
            }
        } else {
            drop();
        }
    }
}

control McastEgress(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    action rewrite_to_unicast(ipv4_addr_t ipv4_dst, mac_t eth_dst) {
        hdr.ipv4.dstAddr = ipv4_dst;
        hdr.ethernet.dstAddr = eth_dst;
        if (hdr.udp.isValid()) {
            hdr.udp.checksum = 0;
        }
    }

    table replica_rewrite {
        key = {
            standard_metadata.egress_rid: exact;
        }
        actions = {
            rewrite_to_unicast;
            NoAction;
        }
        default_action = NoAction();
        size = REWRITE_TABLE_SIZE;
    }

    apply {
        if (standard_metadata.instance_type == PKT_INSTANCE_TYPE_INGRESS_CLONE) {
            // the CPU copy of a source-check miss: the packet as it arrived; or a
            // fast-failover report: a heartbeat frame whose source MAC is the gap
            if (meta.ff_report_gap != 0) {
                hdr.ethernet.etherType = ETHERTYPE_HEARTBEAT;
                hdr.ethernet.srcAddr = meta.ff_report_gap;
                hdr.ipv4.setInvalid();
                hdr.udp.setInvalid();
                truncate(14 + 2);  // the packet_in header and Ethernet only
            }
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = meta.copy_ingress_port;
            hdr.packet_in._pad = 0;
            exit;
        }
        if (standard_metadata.instance_type == PKT_INSTANCE_TYPE_REPLICATION) {
            if (!replica_rewrite.apply().hit) {
                // a plain tree replica: never back out of the port it came in on
                if (standard_metadata.egress_port == standard_metadata.ingress_port) {
                    mark_to_drop(standard_metadata);
                }
            }
        }
    }
}

control McastComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control McastDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.packet_in);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.arp);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
    }
}

V1Switch(McastParser(), McastVerifyChecksum(), McastIngress(), McastEgress(),
         McastComputeChecksum(), McastDeparser()) main;
