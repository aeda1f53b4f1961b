/*
 * tna/mcast.p4: the multicast data plane of p4src/mcast.p4 for Tofino: TNA
 * (Tofino 1, `--target tofino --arch tna`) and T2NA (Tofino 2, `--target
 * tofino2 --arch t2na`), one source, the chip chosen by bf-p4c's
 * __TARGET_TOFINO__. Sizes and constants: tna/sizes.p4.
 *
 * The same pipeline and the same P4Runtime names as the v1model program
 * (docs/p4.md): every table, action, parameter, match field, action profile,
 * meter, counter and controller header carries the v1model name (`@name`),
 * including the match fields named after v1model's standard_metadata
 * (`standard_metadata.ingress_port` is ig_intr_md.ingress_port here), so one
 * controller resolves both P4Infos by the same names. What differs for the
 * controller: the CPU port (tna/sizes.p4) and the device config (bf-p4c's
 * binary, not BMv2 JSON).
 *
 * Where TNA differs from v1model:
 *   - the ingress port is not visible in egress: a bridged header (`bridge_h`)
 *     carries it, with the packet's kind (plain, multicast, to the CPU);
 *   - the CPU copy of a source-check miss or of a known host's ARP is an
 *     ingress mirror (the Mirror extern, session CPU_CLONE_SESSION), which
 *     prepends a mirror header of the same layout; the egress turns either
 *     into the packet_in header, so the packet_in header is made in egress
 *     for everything sent to the CPU;
 *   - the packet-in meter is executed at one place (Tofino executes a
 *     stateful extern once per packet): ingress first decides whether the
 *     packet goes to the CPU alone ("punt") or is also copied ("copy");
 *   - meter colours are 0 green, 1 yellow, 3 red (MeterColor_t);
 *   - the IPv4 checksum is recomputed by the deparsers' Checksum unit.
 */
#include <core.p4>
#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif
#include "sizes.p4"

const PortId_t CPU_PORT = CPU_PORT_NUMBER;
const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_ARP = 0x0806;
const bit<16> ETHERTYPE_LLDP = 0x88cc;
const bit<8> IP_PROTO_UDP = 17;
const bit<8> COLOR_RED = 3;  // MeterColor_t.RED

// the bridged / mirror header's kind
const bit<8> KIND_PLAIN = 0;   // unicast, a single multicast copy, a packet-out
const bit<8> KIND_MCAST = 1;   // replicated by the PRE (egress_rid is the replica's instance)
const bit<8> KIND_TO_CPU = 2;  // to the CPU alone (LLDP, ARP the switch does not route)
const bit<8> KIND_MIRROR = 3;  // the mirror copy to the CPU (source check, known ARP)
const MirrorType_t MIRROR_TYPE_TO_CPU = 1;

typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

// The controller headers have the v1model names and widths, the padding first
// (as in fabric-tna): the port sits in the low bits of a 16-bit container,
// aligned with the intrinsic ports it is compared with or copied from.
@controller_header("packet_in")
header packet_in_h {
    bit<7> _pad;
    PortId_t ingress_port;
}

@controller_header("packet_out")
header packet_out_h {
    bit<7> _pad;
    PortId_t egress_port;
}

// ingress -> egress: bridged on every packet, and the layout of the mirror header
header bridge_h {
    bit<8> kind;
    bit<7> _pad;
    PortId_t ingress_port;
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
    bridge_h bridge;
    packet_out_h packet_out;
    packet_in_h packet_in;
    ethernet_h ethernet;
    arp_h arp;
    ipv4_h ipv4;
    udp_h udp;
}

struct ig_metadata_t {
    bit<8> job_color;  // the job meter's colour (multicast table, direct meter)
    bit<8> cpu_color;  // the packet-in meter's colour
    MirrorId_t mirror_session;
    bit<8> mirror_kind;  // the mirror header's fields (a field list, not constants)
    bit<7> mirror_pad;
    PortId_t mirror_port;
}

struct eg_metadata_t {
}

// -- ingress ---------------------------------------------------------------------------------

parser McastIngressParser(packet_in pkt, out headers_t hdr, out ig_metadata_t meta,
                          out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        meta.job_color = 0;
        meta.cpu_color = 0;
        meta.mirror_session = 0;
        meta.mirror_kind = KIND_MIRROR;
        meta.mirror_port = 0;
        meta.mirror_pad = 0;
        transition select(ig_intr_md.ingress_port) {
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

control McastIngress(inout headers_t hdr, inout ig_metadata_t meta,
                     in ingress_intrinsic_metadata_t ig_intr_md,
                     in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                     inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                     inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    // per job: packets and bytes of every multicast entry; the PS-edge entry's
    // meter polices the job to its planned rate (unconfigured: all green)
    @name("job_counter") DirectCounter<bit<64>>(CounterType_t.PACKETS_AND_BYTES) job_counter;
    @name("job_meter") DirectMeter(MeterType_t.BYTES) job_meter;
    // one meter caps everything sent to the CPU port (index 0; unconfigured: no cap)
    @name("packet_in_meter") Meter<bit<1>>(1, MeterType_t.PACKETS) packet_in_meter;
    // the source guard's refusals, per ingress port (packets not forwarded)
    @name("source_guard_drops") Counter<bit<64>, PortId_t>(GUARD_COUNTER_SIZE, CounterType_t.PACKETS) source_guard_drops;

    bool punt = false;  // to the CPU alone
    bool copy = false;  // forwarded, and a mirror copy to the CPU

    @name("drop") action drop() {
        ig_dprsr_md.drop_ctl = 1;
    }

    @name("mcast_drop") action mcast_drop() {
        job_counter.count();
        meta.job_color = job_meter.execute();
        ig_dprsr_md.drop_ctl = 1;
    }

    @name("set_mcast_group") action set_mcast_group(@name("group") MulticastGroupId_t group) {
        job_counter.count();
        meta.job_color = job_meter.execute();
        ig_tm_md.mcast_grp_a = group;
        hdr.bridge.kind = KIND_MCAST;
    }

    @name("set_egress_port") action set_egress_port(@name("port") PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
    }

    @name("mcast_egress_port") action mcast_egress_port(@name("port") PortId_t port) {
        job_counter.count();
        meta.job_color = job_meter.execute();
        ig_tm_md.ucast_egress_port = port;
    }

    @name("unicast_copy") action unicast_copy(@name("port") PortId_t port,
                                              @name("ipv4_dst") ipv4_addr_t ipv4_dst,
                                              @name("eth_dst") mac_t eth_dst) {
        job_counter.count();
        meta.job_color = job_meter.execute();
        hdr.ipv4.dstAddr = ipv4_dst;
        hdr.ethernet.dstAddr = eth_dst;
        hdr.udp.checksum = 0;  // emitted only where the UDP header is valid
        ig_tm_md.ucast_egress_port = port;
    }

    @name("multicast") table multicast {
        key = {
            ig_intr_md.ingress_port: exact @name("standard_metadata.ingress_port");
            hdr.ipv4.dstAddr: exact @name("hdr.ipv4.dstAddr");
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

    // the source check: a host port (copy_to_cpu) and the known hosts on it
    @name("copy_to_cpu") action copy_to_cpu() {
    }

    @name("host_ports") table host_ports {
        key = {
            ig_intr_md.ingress_port: exact @name("standard_metadata.ingress_port");
        }
        actions = {
            copy_to_cpu;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = HOST_PORTS_SIZE;
    }

    @name("known_source") action known_source() {
    }

    // ports toward another switch: their packets were admitted at their edge switch
    @name("transit") action transit() {
    }

    @name("switch_ports") table switch_ports {
        key = {
            ig_intr_md.ingress_port: exact @name("standard_metadata.ingress_port");
        }
        actions = {
            transit;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = SWITCH_PORTS_SIZE;
    }

    @name("known_sources") table known_sources {
        key = {
            ig_intr_md.ingress_port: exact @name("standard_metadata.ingress_port");
            hdr.ipv4.srcAddr: exact @name("hdr.ipv4.srcAddr");
            hdr.ethernet.srcAddr: exact @name("hdr.ethernet.srcAddr");
        }
        actions = {
            known_source;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = KNOWN_SOURCES_SIZE;
    }

    @name("known_arp_sources") table known_arp_sources {
        key = {
            ig_intr_md.ingress_port: exact @name("standard_metadata.ingress_port");
            hdr.arp.spa: exact @name("hdr.arp.spa");
            hdr.ethernet.srcAddr: exact @name("hdr.ethernet.srcAddr");
        }
        actions = {
            known_source;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = KNOWN_SOURCES_SIZE;
    }

    @name("arp_routes") table arp_routes {
        key = {
            hdr.arp.tpa: exact @name("hdr.arp.tpa");
        }
        actions = {
            set_egress_port;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = ARP_ROUTES_SIZE;
    }

    @name("to_cpu") action to_cpu() {
        ig_tm_md.ucast_egress_port = CPU_PORT;
        hdr.bridge.kind = KIND_TO_CPU;  // the egress adds the packet_in header
    }

    // The P4Info lists the action profile, marked with_selector: it carries the
    // v1model selector's name, `ecmp_selector`, so the members are written alike.
    Hash<bit<16>>(HashAlgorithm_t.CRC16) ecmp_hash;
    @name("ecmp_selector") ActionProfile(ECMP_MEMBERS) ecmp_profile;
    @name("ecmp_selector_sel")
    ActionSelector(ecmp_profile, ecmp_hash, SelectorMode_t.FAIR, ECMP_MAX_GROUP_SIZE, ECMP_GROUPS) ecmp_selector;

    @name("ipv4_lpm") table ipv4_lpm {
        key = {
            hdr.ipv4.dstAddr: lpm @name("hdr.ipv4.dstAddr");
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
        hdr.bridge.setValid();
        hdr.bridge.kind = KIND_PLAIN;
        hdr.bridge._pad = 0;
        hdr.bridge.ingress_port = ig_intr_md.ingress_port;
        if (hdr.packet_out.isValid()) {
            // from the controller: out of the port it names, nothing else
            ig_tm_md.ucast_egress_port = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
        } else if (hdr.ethernet.etherType == ETHERTYPE_LLDP) {
            punt = true;
        } else {
            // a host port, a port toward another switch, or neither (not
            // classified yet): every port but a switch's is guarded
            host_ports.apply();
            bool from_switch = false;
            if (switch_ports.apply().hit) {
                from_switch = true;
            }
            if (hdr.arp.isValid()) {
                bool admitted = true;
                if (!from_switch) {
                    if (!known_arp_sources.apply().hit) {
                        admitted = false;
                        // the guard: not a known host's ARP at this port, never routed
                        source_guard_drops.count(ig_intr_md.ingress_port);
                    }
                }
                bool routed = false;
                if (admitted) {
                    if (arp_routes.apply().hit) {
                        routed = true;
                    }
                }
                if (routed) {
                    if (!from_switch) {
                        copy = true;
                    }
                    if (ig_tm_md.ucast_egress_port == ig_intr_md.ingress_port) {
                        drop();  // a route never reflects a packet
                    }
                } else {
                    punt = true;  // an unknown host or target: the controller learns and answers
                }
            } else if (!hdr.ipv4.isValid()) {
                drop();
            } else {
                // known_sources is applied to every packet, not only to those
                // from a guarded port: in the same stage as switch_ports, so that
                // the multicast table still starts in the stage after them
                bool known = false;
                if (known_sources.apply().hit) {
                    known = true;
                }
                if (!from_switch && !known) {
                    // the guard: not a known host's source at this port: a mirror
                    // copy to the CPU (under the cap; the controller learns a new
                    // host), and the packet itself is dropped, never forwarded
                    // (drop_ctl does not stop the mirror)
                    copy = true;
                    source_guard_drops.count(ig_intr_md.ingress_port);
                    drop();
                } else if (hdr.ipv4.dstAddr[31:28] == 4w0xE) {
                    switch (multicast.apply().action_run) {
                        mcast_egress_port: {
                            // a multicast copy never goes back out of its ingress port
                            if (ig_tm_md.ucast_egress_port == ig_intr_md.ingress_port) {
                                drop();
                            }
                        }
                    }
                    if (meta.job_color == COLOR_RED) {
                        drop();  // over the job's planned rate (only the PS-edge entry is metered)
                    }
                } else if (ipv4_lpm.apply().hit) {
                    if (ig_tm_md.ucast_egress_port == ig_intr_md.ingress_port) {
                        drop();  // a route never reflects a packet
                    }
                } else {
                    drop();
                }
            }
        }
        if (punt || copy) {
            meta.cpu_color = packet_in_meter.execute(0);
            if (meta.cpu_color == COLOR_RED) {
                if (punt) {
                    drop();  // over the packet-in cap (a copy is just not made)
                }
            } else if (punt) {
                to_cpu();
            } else {
                ig_dprsr_md.mirror_type = MIRROR_TYPE_TO_CPU;
                meta.mirror_session = CPU_CLONE_SESSION;
                meta.mirror_port = ig_intr_md.ingress_port;
            }
        }
    }
}

control McastIngressDeparser(packet_out pkt, inout headers_t hdr, in ig_metadata_t meta,
                             in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() ipv4_checksum;
    Mirror() mirror;
    apply {
        if (ig_dprsr_md.mirror_type == MIRROR_TYPE_TO_CPU) {
            // the copy: the packet as it arrived, behind a mirror header naming its port
            mirror.emit<bridge_h>(meta.mirror_session, {meta.mirror_kind, meta.mirror_pad, meta.mirror_port});
        }
        hdr.ipv4.hdrChecksum = ipv4_checksum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
            hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
            hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr});
        pkt.emit(hdr.bridge);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.arp);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
    }
}

// -- egress ----------------------------------------------------------------------------------

parser McastEgressParser(packet_in pkt, out headers_t hdr, out eg_metadata_t meta,
                         out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        // bridged or mirror header: the same layout, told apart by `kind`
        pkt.extract(hdr.bridge);
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

control McastEgress(inout headers_t hdr, inout eg_metadata_t meta,
                    in egress_intrinsic_metadata_t eg_intr_md,
                    in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                    inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                    inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    @name("rewrite_to_unicast") action rewrite_to_unicast(@name("ipv4_dst") ipv4_addr_t ipv4_dst,
                                                          @name("eth_dst") mac_t eth_dst) {
        hdr.ipv4.dstAddr = ipv4_dst;
        hdr.ethernet.dstAddr = eth_dst;
        hdr.udp.checksum = 0;
    }

    @name("replica_rewrite") table replica_rewrite {
        key = {
            eg_intr_md.egress_rid: exact @name("standard_metadata.egress_rid");
        }
        actions = {
            rewrite_to_unicast;
            NoAction;
        }
        default_action = NoAction();
        size = REWRITE_TABLE_SIZE;
    }

    apply {
        if (hdr.bridge.kind == KIND_MIRROR || hdr.bridge.kind == KIND_TO_CPU) {
            // to the CPU: the packet_in header names the port it came in on
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = hdr.bridge.ingress_port;
            hdr.packet_in._pad = hdr.bridge._pad;  // 0: one source, no constant (a Tofino action limit)
        } else if (hdr.bridge.kind == KIND_MCAST) {
            if (!replica_rewrite.apply().hit) {
                // a plain tree replica: never back out of the port it came in on
                if (eg_intr_md.egress_port == hdr.bridge.ingress_port) {
                    eg_dprsr_md.drop_ctl = 1;
                }
            }
        }
    }
}

control McastEgressDeparser(packet_out pkt, inout headers_t hdr, in eg_metadata_t meta,
                            in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;
    apply {
        hdr.ipv4.hdrChecksum = ipv4_checksum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
            hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
            hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr});
        // the bridged header stays inside the switch
        pkt.emit(hdr.packet_in);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.arp);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
    }
}

Pipeline(McastIngressParser(), McastIngress(), McastIngressDeparser(),
         McastEgressParser(), McastEgress(), McastEgressDeparser()) pipe;

Switch(pipe) main;
