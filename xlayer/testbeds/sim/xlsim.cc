// The C++ half of xlayer's ns-3 simulator (namespace xlsim): capture writers, ground-truth
// recorders, the TCP sampler and the injections.  Not built ahead of time: xlayer.testbeds.sim.native
// reads this file and compiles it into the running ns-3 with cppyy.cppdef (once per process),
// after ns-3's own libraries and headers are loaded; its docstring describes what each part does.

#include "ns3/ampdu-subframe-header.h"
#include "ns3/arp-cache.h"
#include "ns3/arp-header.h"
#include "ns3/arp-l3-protocol.h"
#include "ns3/ipv4-interface.h"
#include "ns3/constant-velocity-mobility-model.h"
#include "ns3/error-model.h"
#include "ns3/ipv4-end-point.h"
#include "ns3/ipv4-l3-protocol.h"
#include "ns3/tag.h"
#include "ns3/mac48-address.h"
#include "ns3/mobility-model.h"
#include "ns3/node.h"
#include "ns3/object-vector.h"
#include "ns3/packet.h"
#include "ns3/packet-sink.h"
#include "ns3/point-to-point-channel.h"
#include "ns3/point-to-point-net-device.h"
#include "ns3/radiotap-header.h"
#include "ns3/rtt-estimator.h"
#include "ns3/simulator.h"
#include "ns3/sta-wifi-mac.h"
#include "ns3/tcp-congestion-ops.h"
#include "ns3/tcp-header.h"
#include "ns3/tcp-l4-protocol.h"
#include "ns3/tcp-socket-base.h"
#include "ns3/tcp-socket-state.h"
#include "ns3/tcp-tx-buffer.h"
#include "ns3/wifi-mac-queue.h"
#include "ns3/wifi-mac.h"
#include "ns3/wifi-mpdu.h"
#include "ns3/wifi-net-device.h"
#include "ns3/wifi-phy.h"
#include "ns3/wifi-psdu.h"
#include "ns3/wifi-tx-vector.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace xlsim
{
using namespace ns3;

// ------------------------------------------------------------------------------------------------
// CRC-32 (IEEE 802.3 / 802.11 FCS): reflected, polynomial 0xEDB88320, init and final xor ~0.

static uint32_t g_crcTable[256];
static bool g_crcReady = false;

static uint32_t
Crc32(const uint8_t* d, size_t n)
{
    if (!g_crcReady)
    {
        for (uint32_t i = 0; i < 256; ++i)
        {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k)
            {
                c = (c & 1) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
            }
            g_crcTable[i] = c;
        }
        g_crcReady = true;
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i)
    {
        c = g_crcTable[(c ^ d[i]) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

// ------------------------------------------------------------------------------------------------
// packet ids: ns-3's packet uid is not one per IP packet (TCP segments are fragments of the
// application's write and share its uid, and a retransmission copies the same bytes again), so every
// IPv4 transmission of the server and the stations gets a ByteTag with a fresh id.  Byte tags survive
// copies, headers, 802.11 fragmentation and A-MPDU aggregation.

class PidTag : public Tag
{
  public:
    uint64_t id = 0;

    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("xlsim::PidTag").SetParent<Tag>().SetGroupName("Network").AddConstructor<PidTag>();
        return tid;
    }

    TypeId GetInstanceTypeId() const override { return GetTypeId(); }
    uint32_t GetSerializedSize() const override { return 8; }
    void Serialize(TagBuffer b) const override { b.WriteU64(id); }
    void Deserialize(TagBuffer b) override { id = b.ReadU64(); }
    void Print(std::ostream& os) const override { os << "pid=" << id; }
};

static uint64_t g_nextPid = 1;

static inline unsigned long long
Pid(Ptr<const Packet> p)
{
    PidTag t;
    return p->FindFirstMatchingByteTag(t) ? static_cast<unsigned long long>(t.id) : 0ULL;
}

// ------------------------------------------------------------------------------------------------
// clocks

struct SimClock
{
    bool set = false;
    int64_t l0 = 0;      // local ns at true time 0
    double rate = 1.0;   // local ns per true ns
    double sigma = 0.0;  // jitter standard deviation, ns
    double bound = 0.0;  // |jitter| <= bound, ns
    int64_t last = INT64_MIN;
    int64_t lastT = INT64_MIN;
    std::mt19937_64 rng;
    bool spareOk = false;
    double spare = 0.0;

    double Uniform() // (0, 1]
    {
        return (static_cast<double>(rng() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    }

    double Gauss() // Box-Muller, written out so the draws do not depend on the C++ library
    {
        if (spareOk)
        {
            spareOk = false;
            return spare;
        }
        double u1 = Uniform();
        double u2 = Uniform();
        double r = std::sqrt(-2.0 * std::log(u1));
        spare = r * std::sin(2.0 * M_PI * u2);
        spareOk = true;
        return r * std::cos(2.0 * M_PI * u2);
    }

    int64_t Ideal(int64_t t) const
    {
        return l0 + std::llround(static_cast<double>(t) * rate);
    }

    // A capture timestamp: the ideal clock plus bounded jitter, never before the previous one.
    // Records of one instant (the MPDUs of an A-MPDU) share one stamp, as a driver gives them.
    int64_t Stamp(int64_t t)
    {
        if (t == lastT)
        {
            return last;
        }
        lastT = t;
        int64_t v = Ideal(t);
        if (sigma > 0.0)
        {
            double j;
            do
            {
                j = Gauss() * sigma;
            } while (std::fabs(j) > bound);
            v += std::llround(j);
        }
        if (v < last)
        {
            v = last;
        }
        last = v;
        return v;
    }
};

static std::vector<SimClock> g_clocks(16);

void
SetClock(int id, long long l0, double rate, double sigmaNs, double boundNs, unsigned long long seed)
{
    SimClock& c = g_clocks.at(id);
    c.set = true;
    c.l0 = l0;
    c.rate = rate;
    c.sigma = sigmaNs;
    c.bound = boundNs;
    c.rng.seed(seed);
    c.last = INT64_MIN;
    c.lastT = INT64_MIN;
    c.spareOk = false;
}

static inline int64_t
NowNs()
{
    return Simulator::Now().GetNanoSeconds();
}

// Local timestamp of "now" on clock id; clock -1 is true simulation time (what ns-3 writes).
static inline int64_t
StampNow(int id)
{
    return id < 0 ? NowNs() : g_clocks.at(id).Stamp(NowNs());
}

// ------------------------------------------------------------------------------------------------
// pcap files

struct PcapOut
{
    FILE* f = nullptr;
    uint32_t snaplen = 65535;
    bool nanos = true;
    uint64_t frames = 0;
    std::string path;

    bool Open(const std::string& p, uint32_t dlt, uint32_t snap, bool ns)
    {
        path = p;
        snaplen = snap ? snap : 65535;
        nanos = ns;
        f = std::fopen(p.c_str(), "wb");
        if (!f)
        {
            return false;
        }
        std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
        uint32_t magic = ns ? 0xA1B23C4Du : 0xA1B2C3D4u;
        uint16_t vmaj = 2, vmin = 4;
        int32_t zone = 0;
        uint32_t sig = 0;
        std::fwrite(&magic, 4, 1, f);
        std::fwrite(&vmaj, 2, 1, f);
        std::fwrite(&vmin, 2, 1, f);
        std::fwrite(&zone, 4, 1, f);
        std::fwrite(&sig, 4, 1, f);
        std::fwrite(&snaplen, 4, 1, f);
        std::fwrite(&dlt, 4, 1, f);
        return true;
    }

    // Write one record; return its 1-based frame number (as Wireshark numbers it).
    uint64_t Write(int64_t tsNs, const uint8_t* data, uint32_t wirelen)
    {
        if (!f)
        {
            return 0;
        }
        uint32_t incl = wirelen < snaplen ? wirelen : snaplen;
        uint32_t sec, frac;
        if (tsNs < 0)
        {
            tsNs = 0;
        }
        if (nanos)
        {
            sec = static_cast<uint32_t>(tsNs / 1000000000);
            frac = static_cast<uint32_t>(tsNs % 1000000000);
        }
        else
        {
            int64_t us = tsNs / 1000;
            sec = static_cast<uint32_t>(us / 1000000);
            frac = static_cast<uint32_t>(us % 1000000);
        }
        uint32_t hdr[4] = {sec, frac, incl, wirelen};
        std::fwrite(hdr, 4, 4, f);
        std::fwrite(data, 1, incl, f);
        return ++frames;
    }

    void Close()
    {
        if (f)
        {
            std::fflush(f);
            std::fclose(f);
            f = nullptr;
        }
    }
};

static std::vector<uint8_t> g_buf;

static const uint8_t*
PacketBytes(Ptr<const Packet> p, uint32_t n, uint32_t prefix = 0)
{
    if (g_buf.size() < prefix + n)
    {
        g_buf.resize(prefix + n + 256);
    }
    p->CopyData(g_buf.data() + prefix, n);
    return g_buf.data();
}

// ------------------------------------------------------------------------------------------------
// truth logs (CSV)

static std::map<std::string, FILE*> g_logs;
static std::string g_logDir;

static FILE*
Log(const std::string& name, const char* header)
{
    auto it = g_logs.find(name);
    if (it != g_logs.end())
    {
        return it->second;
    }
    if (g_logDir.empty())
    {
        return g_logs[name] = nullptr;
    }
    FILE* f = std::fopen((g_logDir + "/" + name + ".csv").c_str(), "w");
    if (f)
    {
        std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
        std::fprintf(f, "%s\n", header);
    }
    return g_logs[name] = f;
}

void
SetLogDir(const std::string& dir)
{
    g_logDir = dir;
}

static inline unsigned long long
MacInt(const Mac48Address& a)
{
    uint8_t b[6];
    a.CopyTo(b);
    unsigned long long v = 0;
    for (int i = 0; i < 6; ++i)
    {
        v = (v << 8) | b[i];
    }
    return v;
}

// IPv4/TCP/UDP identity of a frame: parsed from raw bytes at `off` (the IPv4 header).
struct Ident
{
    int ethType = -1;
    long ipId = -1, proto = -1, sport = -1, dport = -1, ipLen = -1, payload = -1, flags = -1;
    long long seq = -1;
    unsigned src = 0, dst = 0;
};

static Ident
ParseIp(const uint8_t* b, uint32_t n, uint32_t off, int ethType)
{
    Ident id;
    id.ethType = ethType;
    if (ethType != 0x0800 || n < off + 20 || (b[off] >> 4) != 4)
    {
        return id;
    }
    uint32_t ihl = (b[off] & 0x0F) * 4;
    id.ipLen = (b[off + 2] << 8) | b[off + 3];
    id.ipId = (b[off + 4] << 8) | b[off + 5];
    id.proto = b[off + 9];
    id.src = (unsigned(b[off + 12]) << 24) | (b[off + 13] << 16) | (b[off + 14] << 8) | b[off + 15];
    id.dst = (unsigned(b[off + 16]) << 24) | (b[off + 17] << 16) | (b[off + 18] << 8) | b[off + 19];
    uint32_t l4 = off + ihl;
    if ((id.proto == 6 || id.proto == 17) && n >= l4 + 8)
    {
        id.sport = (b[l4] << 8) | b[l4 + 1];
        id.dport = (b[l4 + 2] << 8) | b[l4 + 3];
    }
    if (id.proto == 6 && n >= l4 + 14)
    {
        id.seq = (static_cast<long long>(b[l4 + 4]) << 24) | (b[l4 + 5] << 16) | (b[l4 + 6] << 8) |
                 b[l4 + 7];
        uint32_t doff = (b[l4 + 12] >> 4) * 4;
        id.flags = b[l4 + 13] | ((b[l4 + 12] & 1) << 8);
        id.payload = static_cast<long>(id.ipLen) - ihl - doff;
    }
    else if (id.proto == 17)
    {
        id.payload = static_cast<long>(id.ipLen) - ihl - 8;
    }
    return id;
}

// The identity's columns, last on a truth log's line: ip_id,src,dst,proto,sport,dport,seq,payload,
// ip_len,tcp_flags, then the end of the line.
static void
LogIdent(FILE* f, const Ident& id)
{
    std::fprintf(f,
                 "%ld,%u,%u,%ld,%ld,%ld,%lld,%ld,%ld,%ld\n",
                 id.ipId,
                 id.src,
                 id.dst,
                 id.proto,
                 id.sport,
                 id.dport,
                 id.seq,
                 id.payload,
                 id.ipLen,
                 id.flags);
}

static void
LogRecord(FILE* f, uint64_t frame, int64_t t, unsigned long long pid, int dir, const Ident& id)
{
    if (!f)
    {
        return;
    }
    std::fprintf(f,
                 "%llu,%lld,%llu,%d,%d,",
                 static_cast<unsigned long long>(frame),
                 static_cast<long long>(t),
                 pid,
                 dir,
                 id.ethType);
    LogIdent(f, id);
}

// WifiMacHeader::GetFrameControl is protected; reach it the same way.
struct HdrPeek : public WifiMacHeader
{
    static uint16_t Fc(const WifiMacHeader& h) { return (h.*(&HdrPeek::GetFrameControl))(); }
};

static const char* RECORD_HEADER =
    "frame,t_ns,pid,dir,eth_type,ip_id,src,dst,proto,sport,dport,seq,payload,ip_len,tcp_flags";

// ------------------------------------------------------------------------------------------------
// air capture

struct AirCapture
{
    PcapOut out;
    int clock = -1;    // pcap timestamps
    int tsfClock = -1; // radiotap TSFT; -1: Now() in µs, as ns-3's pcap helper writes it
    bool fcs = true;
    int64_t firstBit = 0;
    uint64_t limit = 0;
    double stopTime = -1.0;
    bool log = false;
};

static AirCapture g_air;

static void
AirPayloadBegin(WifiTxVector txVector, Time psduDuration)
{
    g_air.firstBit = NowNs() - WifiPhy::CalculatePhyPreambleAndHeaderDuration(txVector).GetNanoSeconds();
}

static void
BuildRadiotap(RadiotapHeader& h,
              uint64_t tsft,
              uint16_t freq,
              const WifiTxVector& v,
              const MpduInfo& aMpdu,
              const SignalNoiseDbm& sn,
              uint16_t staId)
{
    const auto preamble = v.GetPreambleType();
    const auto modClass = v.GetModulationClass();
    const auto width = v.GetChannelWidth();
    const auto gi = v.GetGuardInterval();
    h.SetTsft(tsft);
    uint8_t flags = RadiotapHeader::FRAME_FLAG_FCS_INCLUDED;
    if (preamble == WIFI_PREAMBLE_SHORT)
    {
        flags |= RadiotapHeader::FRAME_FLAG_SHORT_PREAMBLE;
    }
    if (gi.GetNanoSeconds() == 400)
    {
        flags |= RadiotapHeader::FRAME_FLAG_SHORT_GUARD;
    }
    h.SetFrameFlags(flags);
    uint64_t rate = 0;
    if (modClass < WIFI_MOD_CLASS_HT)
    {
        rate = v.GetMode(staId).GetDataRate(width, gi, 1) / 500000;
        h.SetRate(static_cast<uint8_t>(rate));
    }
    RadiotapHeader::ChannelFields ch{};
    ch.frequency = freq;
    switch (rate)
    {
    case 2:
    case 4:
    case 10:
    case 22:
        ch.flags |= RadiotapHeader::CHANNEL_FLAG_CCK;
        break;
    default:
        ch.flags |= RadiotapHeader::CHANNEL_FLAG_OFDM;
        break;
    }
    ch.flags |= freq < 2500 ? RadiotapHeader::CHANNEL_FLAG_SPECTRUM_2GHZ
                            : RadiotapHeader::CHANNEL_FLAG_SPECTRUM_5GHZ;
    h.SetChannelFields(ch);
    h.SetAntennaSignalPower(sn.signal);
    h.SetAntennaNoisePower(sn.noise);
    if (modClass == WIFI_MOD_CLASS_HT)
    {
        RadiotapHeader::McsFields m{};
        m.mcs = v.GetMode(staId).GetMcsValue();
        m.known = RadiotapHeader::MCS_KNOWN_INDEX | RadiotapHeader::MCS_KNOWN_BANDWIDTH |
                  RadiotapHeader::MCS_KNOWN_GUARD_INTERVAL | RadiotapHeader::MCS_KNOWN_HT_FORMAT |
                  RadiotapHeader::MCS_KNOWN_NESS | RadiotapHeader::MCS_KNOWN_FEC_TYPE |
                  RadiotapHeader::MCS_KNOWN_STBC;
        if (width == 40)
        {
            m.flags |= RadiotapHeader::MCS_FLAGS_BANDWIDTH_40;
        }
        if (gi.GetNanoSeconds() == 400)
        {
            m.flags |= RadiotapHeader::MCS_FLAGS_GUARD_INTERVAL;
        }
        const auto ness = v.GetNess();
        if (ness & 0x01)
        {
            m.flags |= RadiotapHeader::MCS_FLAGS_NESS_BIT_0;
        }
        if (ness & 0x02)
        {
            m.flags |= RadiotapHeader::MCS_KNOWN_NESS_BIT_1;
        }
        if (v.IsStbc())
        {
            m.flags |= RadiotapHeader::MCS_FLAGS_STBC_STREAMS;
        }
        h.SetMcsFields(m);
    }
    if (v.IsAggregation())
    {
        RadiotapHeader::AmpduStatusFields a{};
        a.referenceNumber = aMpdu.mpduRefNumber;
        a.flags |= RadiotapHeader::A_MPDU_STATUS_LAST_KNOWN;
        if (aMpdu.type == LAST_MPDU_IN_AGGREGATE)
        {
            a.flags |= RadiotapHeader::A_MPDU_STATUS_LAST;
        }
        h.SetAmpduStatus(a);
    }
    // VHT and HE fields as ns-3's own WifiPhyHelper writes them (presence order: after A-MPDU status).
    if (modClass == WIFI_MOD_CLASS_VHT)
    {
        RadiotapHeader::VhtFields vf{};
        vf.known = RadiotapHeader::VHT_KNOWN_STBC | RadiotapHeader::VHT_KNOWN_GUARD_INTERVAL |
                   RadiotapHeader::VHT_KNOWN_BANDWIDTH;
        if (v.IsStbc())
        {
            vf.flags |= RadiotapHeader::VHT_FLAGS_STBC;
        }
        if (gi.GetNanoSeconds() == 400)
        {
            vf.flags |= RadiotapHeader::VHT_FLAGS_GUARD_INTERVAL;
        }
        vf.bandwidth = width == 40 ? 1 : width == 80 ? 4 : width == 160 ? 11 : 0;
        vf.mcsNss.at(0) = static_cast<uint8_t>((v.GetNss(staId) & 0x0f) |
                                                ((v.GetMode(staId).GetMcsValue() << 4) & 0xf0));
        h.SetVhtFields(vf);
    }
    if (modClass == WIFI_MOD_CLASS_HE)
    {
        RadiotapHeader::HeFields hf{};
        hf.data1 = RadiotapHeader::HE_DATA1_DATA_MCS_KNOWN | RadiotapHeader::HE_DATA1_BW_RU_ALLOC_KNOWN;
        hf.data2 = RadiotapHeader::HE_DATA2_GI_KNOWN;
        hf.data3 = static_cast<uint16_t>((v.GetMode(staId).GetMcsValue() << 8) & RadiotapHeader::HE_DATA3_DATA_MCS);
        hf.data5 = width == 40    ? RadiotapHeader::HE_DATA5_DATA_BW_RU_ALLOC_40MHZ
                   : width == 80  ? RadiotapHeader::HE_DATA5_DATA_BW_RU_ALLOC_80MHZ
                   : width == 160 ? RadiotapHeader::HE_DATA5_DATA_BW_RU_ALLOC_160MHZ
                                  : 0;
        if (gi.GetNanoSeconds() == 1600)
        {
            hf.data5 |= RadiotapHeader::HE_DATA5_GI_1_6;
        }
        else if (gi.GetNanoSeconds() == 3200)
        {
            hf.data5 |= RadiotapHeader::HE_DATA5_GI_3_2;
        }
        hf.data6 = static_cast<uint16_t>(v.GetNss(staId) & 0x0f);   // NSTS (no STBC)
        h.SetHeFields(hf);
    }
}

static void
AirRx(Ptr<const Packet> packet,
      uint16_t freq,
      WifiTxVector txVector,
      MpduInfo aMpdu,
      SignalNoiseDbm sn,
      uint16_t staId)
{
    Ptr<Packet> p = packet->Copy();
    if (txVector.IsAggregation())
    {
        // An A-MPDU subframe arrives with its delimiter and padding; a driver hands up the MPDU.
        AmpduSubframeHeader d;
        p->RemoveHeader(d);
        if (d.GetLength() < p->GetSize())
        {
            p = p->CreateFragment(0, d.GetLength());
        }
    }
    int64_t now = NowNs();
    uint64_t tsft;
    if (g_air.tsfClock >= 0)
    {
        tsft = static_cast<uint64_t>(g_clocks.at(g_air.tsfClock).Ideal(g_air.firstBit) / 1000);
    }
    else
    {
        tsft = static_cast<uint64_t>(Simulator::Now().GetMicroSeconds());
    }
    RadiotapHeader rt;
    BuildRadiotap(rt, tsft, freq, txVector, aMpdu, sn, staId);
    uint32_t rtLen = rt.GetSerializedSize();
    uint32_t mpduLen = p->GetSize();
    Buffer hb;
    hb.AddAtStart(rtLen);
    rt.Serialize(hb.Begin());
    if (g_buf.size() < rtLen + mpduLen)
    {
        g_buf.resize(rtLen + mpduLen + 256);
    }
    hb.CopyData(g_buf.data(), rtLen);
    p->CopyData(g_buf.data() + rtLen, mpduLen);
    uint8_t* b = g_buf.data();
    if (g_air.fcs && mpduLen >= 4)
    {
        uint32_t crc = Crc32(b + rtLen, mpduLen - 4);
        std::memcpy(b + rtLen + mpduLen - 4, &crc, 4);
    }
    uint64_t frame = g_air.out.Write(StampNow(g_air.clock), b, rtLen + mpduLen);
    if (g_air.log)
    {
        static FILE* f = Log("sniff",
                             "frame,t_ns,t_first_ns,pid,uid,fc,seq,frag,retry,size,rate_bps,signal_dbm");
        if (f)
        {
            WifiMacHeader hdr;
            p->PeekHeader(hdr);
            std::fprintf(f,
                         "%llu,%lld,%lld,%llu,%llu,%u,%u,%u,%d,%u,%llu,%.1f\n",
                         static_cast<unsigned long long>(frame),
                         static_cast<long long>(now),
                         static_cast<long long>(g_air.firstBit),
                         Pid(packet),
                         static_cast<unsigned long long>(packet->GetUid()),
                         HdrPeek::Fc(hdr),
                         hdr.GetSequenceNumber(),
                         hdr.GetFragmentNumber(),
                         hdr.IsRetry() ? 1 : 0,
                         mpduLen,
                         static_cast<unsigned long long>(txVector.GetMode(staId).GetDataRate(txVector, staId)),
                         static_cast<double>(sn.signal));
        }
    }
    if (g_air.limit != 0 && frame == g_air.limit)
    {
        // Stop() lets the current event finish, so the rest of this A-MPDU is still written.
        g_air.stopTime = Simulator::Now().GetSeconds();
        Simulator::Stop();
    }
}

bool
OpenAir(Ptr<NetDevice> sniffer,
        const std::string& path,
        uint32_t snaplen,
        bool nanos,
        int clock,
        int tsfClock,
        bool fcs,
        unsigned long long limit,
        bool log)
{
    auto dev = DynamicCast<WifiNetDevice>(sniffer);
    if (!dev || !g_air.out.Open(path, 127, snaplen, nanos))
    {
        return false;
    }
    g_air.clock = clock;
    g_air.tsfClock = tsfClock;
    g_air.fcs = fcs;
    g_air.limit = limit;
    g_air.log = log;
    // The sniffer never transmits, so its receive side is its whole monitor-mode view.
    dev->GetPhy()->TraceConnectWithoutContext("PhyRxPayloadBegin", MakeCallback(&AirPayloadBegin));
    dev->GetPhy()->TraceConnectWithoutContext("MonitorSnifferRx", MakeCallback(&AirRx));
    return true;
}

unsigned long long
AirFrames()
{
    return g_air.out.frames;
}

double
AirStopTime()
{
    return g_air.stopTime;
}

// ------------------------------------------------------------------------------------------------
// wired captures (CSMA PromiscSniffer)

struct WiredCapture
{
    PcapOut out;
    int clock = -1;
    bool stripFcs = true;
    FILE* log = nullptr;
    unsigned long long self = 0;
    uint8_t selfMac[6];
    uint8_t peerMac[6];
};

static std::vector<WiredCapture> g_wired(8);

// Write one Ethernet frame `b` (`len` bytes, from `packet`) to capture idx and log it.
static void
WiredWrite(WiredCapture& w, const uint8_t* b, uint32_t len, Ptr<const Packet> packet)
{
    uint64_t frame = w.out.Write(StampNow(w.clock), b, len);
    if (w.log && len >= 14)
    {
        int ethType = (b[12] << 8) | b[13];
        unsigned long long src = 0;
        for (int i = 6; i < 12; ++i)
        {
            src = (src << 8) | b[i];
        }
        LogRecord(w.log, frame, NowNs(), Pid(packet), src == w.self ? 1 : 0,
                  ParseIp(b, len, 14, ethType));
    }
}

static void
WiredSniff(int idx, Ptr<const Packet> packet)
{
    WiredCapture& w = g_wired.at(idx);
    uint32_t len = packet->GetSize();
    if (w.stripFcs && len >= 4)
    {
        len -= 4; // ns-3's EthernetTrailer: a host capture never contains the FCS
    }
    WiredWrite(w, PacketBytes(packet, len), len, packet);
}

// A point-to-point frame (2-byte PPP header, no FCS) written as the Ethernet II frame a host
// capture on that link would show: the PPP protocol becomes the EtherType, the two ends' addresses
// the MAC addresses.  Transmissions are stamped at their first bit, receptions at their last (as
// the CSMA captures).
static void
WiredP2p(int idx, bool tx, Ptr<const Packet> packet)
{
    WiredCapture& w = g_wired.at(idx);
    uint32_t n = packet->GetSize();
    if (n < 2)
    {
        return;
    }
    PacketBytes(packet, n, 12);
    uint8_t* b = g_buf.data();
    int ppp = (b[12] << 8) | b[13];
    int eth = ppp == 0x0021 ? 0x0800 : (ppp == 0x0057 ? 0x86DD : ppp);
    b[12] = static_cast<uint8_t>(eth >> 8);
    b[13] = static_cast<uint8_t>(eth & 0xFF);
    std::memcpy(b, tx ? w.peerMac : w.selfMac, 6);
    std::memcpy(b + 6, tx ? w.selfMac : w.peerMac, 6);
    WiredWrite(w, b, n + 12, packet);
}

static void
WiredP2pTx(int idx, Ptr<const Packet> packet)
{
    WiredP2p(idx, true, packet);
}

static void
WiredP2pRx(int idx, Ptr<const Packet> packet)
{
    WiredP2p(idx, false, packet);
}

bool
OpenWired(int idx,
          Ptr<NetDevice> dev,
          const std::string& path,
          uint32_t snaplen,
          bool nanos,
          int clock,
          bool stripFcs,
          const std::string& logName)
{
    WiredCapture& w = g_wired.at(idx);
    if (!w.out.Open(path, 1, snaplen, nanos))
    {
        return false;
    }
    w.clock = clock;
    w.stripFcs = stripFcs;
    w.self = MacInt(Mac48Address::ConvertFrom(dev->GetAddress()));
    if (!logName.empty())
    {
        w.log = Log(logName, RECORD_HEADER);
    }
    auto p2p = DynamicCast<PointToPointNetDevice>(dev);
    if (!p2p)
    {
        dev->TraceConnectWithoutContext("PromiscSniffer", MakeBoundCallback(&WiredSniff, idx));
        return true;
    }
    Ptr<Channel> ch = p2p->GetChannel();
    if (!ch || ch->GetNDevices() != 2)
    {
        return false;
    }
    Ptr<NetDevice> peer = ch->GetDevice(0) == dev ? ch->GetDevice(1) : ch->GetDevice(0);
    Mac48Address::ConvertFrom(dev->GetAddress()).CopyTo(w.selfMac);
    Mac48Address::ConvertFrom(peer->GetAddress()).CopyTo(w.peerMac);
    w.stripFcs = false;
    p2p->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&WiredP2pTx, idx));
    p2p->TraceConnectWithoutContext("PhyRxEnd", MakeBoundCallback(&WiredP2pRx, idx));
    return true;
}

// ------------------------------------------------------------------------------------------------
// client capture: the station's MSDUs as Ethernet II frames

struct ClientCapture
{
    PcapOut out;
    int clock = -1;
    uint8_t self[6];
    uint8_t peer[6];
    FILE* log = nullptr;
};

static ClientCapture g_client;

static void
ClientFrame(Ptr<const Packet> packet, int dir)
{
    uint32_t n = packet->GetSize();
    if (n < 8)
    {
        return;
    }
    // MSDU = LLC/SNAP (8 bytes, ending in the EtherType) + payload; Ethernet = dst, src, type, payload.
    PacketBytes(packet, n, 6);
    uint8_t* b = g_buf.data();
    // b[6..13] holds the LLC/SNAP header: its last two bytes are the EtherType, already in place at
    // b[12..13]; the payload follows at b[14..].
    int ethType = (b[12] << 8) | b[13];
    const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    bool arpRequest = ethType == 0x0806 && n >= 8 + 8 && b[14 + 6] == 0 && b[14 + 7] == 1;
    const uint8_t* dst = dir == 0 ? (arpRequest ? bcast : g_client.self) : (arpRequest ? bcast : g_client.peer);
    const uint8_t* src = dir == 0 ? g_client.peer : g_client.self;
    std::memcpy(b, dst, 6);
    std::memcpy(b + 6, src, 6);
    uint32_t len = n - 8 + 14;
    uint64_t frame = g_client.out.Write(StampNow(g_client.clock), b, len);
    if (g_client.log)
    {
        LogRecord(g_client.log, frame, NowNs(), Pid(packet), dir, ParseIp(b, len, 14, ethType));
    }
}

static void
ClientRx(Ptr<const Packet> p)
{
    ClientFrame(p, 0);
}

static void
ClientTx(Ptr<const Packet> p)
{
    ClientFrame(p, 1);
}

bool
OpenClient(Ptr<NetDevice> sta, Ptr<NetDevice> ap, const std::string& path, uint32_t snaplen, int clock)
{
    auto dev = DynamicCast<WifiNetDevice>(sta);
    if (!dev || !g_client.out.Open(path, 1, snaplen, true))
    {
        return false;
    }
    g_client.clock = clock;
    Mac48Address::ConvertFrom(sta->GetAddress()).CopyTo(g_client.self);
    Mac48Address::ConvertFrom(ap->GetAddress()).CopyTo(g_client.peer);
    g_client.log = Log("client", RECORD_HEADER);
    dev->GetMac()->TraceConnectWithoutContext("MacRx", MakeCallback(&ClientRx));
    dev->GetMac()->TraceConnectWithoutContext("MacTx", MakeCallback(&ClientTx));
    return true;
}

// ------------------------------------------------------------------------------------------------
// Wi-Fi truth: every MPDU on the air, MAC events

struct WifiNode
{
    Ptr<WifiNetDevice> dev;
    Ptr<WifiMacQueue> queue;
};

static std::vector<WifiNode> g_wifi(64);

static void
PsduTx(int node, WifiConstPsduMap psduMap, WifiTxVector txVector, double txPowerW)
{
    static FILE* f = Log("tx",
                         "t_ns,node,pid,uid,fc,seq,frag,retry,more_frag,size,rate_bps,mcs,modclass,"
                         "n_mpdu,ampdu,ra,dur_ns");
    if (!f)
    {
        return;
    }
    int64_t now = NowNs();
    auto& wn = g_wifi.at(node);
    int64_t dur = WifiPhy::CalculateTxDuration(psduMap, txVector, wn.dev->GetPhy()->GetPhyBand())
                      .GetNanoSeconds();
    for (const auto& [staId, psdu] : psduMap)
    {
        uint64_t rate = txVector.GetMode(staId).GetDataRate(txVector, staId);
        int mod = static_cast<int>(txVector.GetModulationClass());
        int mcs = mod >= static_cast<int>(WIFI_MOD_CLASS_HT) ? txVector.GetMode(staId).GetMcsValue() : -1;
        size_t n = psdu->GetNMpdus();
        for (auto it = psdu->begin(); it != psdu->end(); ++it)
        {
            Ptr<WifiMpdu> m = *it;
            const WifiMacHeader& h = m->GetHeader();
            std::fprintf(f,
                         "%lld,%d,%llu,%llu,%u,%u,%u,%d,%d,%u,%llu,%d,%d,%zu,%d,%llu,%lld\n",
                         static_cast<long long>(now),
                         node,
                         Pid(m->GetPacket()),
                         static_cast<unsigned long long>(m->GetPacket()->GetUid()),
                         HdrPeek::Fc(h),
                         h.GetSequenceNumber(),
                         h.GetFragmentNumber(),
                         h.IsRetry() ? 1 : 0,
                         h.IsMoreFragments() ? 1 : 0,
                         m->GetSize(),
                         static_cast<unsigned long long>(rate),
                         mcs,
                         mod,
                         n,
                         txVector.IsAggregation() ? 1 : 0,
                         MacInt(h.GetAddr1()),
                         static_cast<long long>(dur));
        }
    }
}

static FILE*
MacLog()
{
    static FILE* f = Log("mac", "t_ns,node,kind,pid,a,b");
    return f;
}

static void
MacEvent(int node, const char* kind, unsigned long long pid, long long a, long long b)
{
    FILE* f = MacLog();
    if (f)
    {
        std::fprintf(f,
                     "%lld,%d,%s,%llu,%lld,%lld\n",
                     static_cast<long long>(NowNs()),
                     node,
                     kind,
                     pid,
                     a,
                     b);
    }
}

static void
MacTx(int node, Ptr<const Packet> p)
{
    // ns-3.44 drops an MSDU arriving at a full WifiMacQueue without firing any trace: record the
    // queue's length as the MSDU arrives, so a full queue at that instant explains a missing MSDU.
    auto& q = g_wifi.at(node).queue;
    long long qlen = q ? q->GetNPackets() : -1;
    long long qmax = q ? q->GetMaxSize().GetValue() : -1;
    MacEvent(node, "enq", Pid(p), qlen, qmax);
}

static void
MacRx(int node, Ptr<const Packet> p)
{
    MacEvent(node, "rx", Pid(p), p->GetSize(), 0);
}

static void
MacTxDrop(int node, Ptr<const Packet> p)
{
    MacEvent(node, "txdrop", Pid(p), 0, 0);
}

static void
DroppedMpdu(int node, WifiMacDropReason reason, Ptr<const WifiMpdu> m)
{
    MacEvent(node, "macdrop", Pid(m->GetPacket()), static_cast<int>(reason),
             m->GetHeader().GetFragmentNumber());
}

static void
QueueDropBefore(int node, Ptr<const WifiMpdu> m)
{
    MacEvent(node, "qdrop", Pid(m->GetPacket()), 0, 0);
}

static void
QueueExpired(int node, Ptr<const WifiMpdu> m)
{
    MacEvent(node, "expired", Pid(m->GetPacket()), 0, 0);
}

static void
Assoc(int node, Mac48Address bssid)
{
    MacEvent(node, "assoc", 0, static_cast<long long>(MacInt(bssid)), 0);
}

static void
DeAssoc(int node, Mac48Address bssid)
{
    MacEvent(node, "deassoc", 0, static_cast<long long>(MacInt(bssid)), 0);
}

bool
HookWifi(Ptr<NetDevice> nd, int node, bool ap)
{
    auto dev = DynamicCast<WifiNetDevice>(nd);
    if (!dev)
    {
        return false;
    }
    auto mac = dev->GetMac();
    auto& wn = g_wifi.at(node);
    wn.dev = dev;
    wn.queue = mac->GetTxopQueue(mac->GetQosSupported() ? AC_BE : AC_BE_NQOS);
    dev->GetPhy()->TraceConnectWithoutContext("PhyTxPsduBegin", MakeBoundCallback(&PsduTx, node));
    mac->TraceConnectWithoutContext("MacTx", MakeBoundCallback(&MacTx, node));
    mac->TraceConnectWithoutContext("MacRx", MakeBoundCallback(&MacRx, node));
    mac->TraceConnectWithoutContext("MacTxDrop", MakeBoundCallback(&MacTxDrop, node));
    mac->TraceConnectWithoutContext("DroppedMpdu", MakeBoundCallback(&DroppedMpdu, node));
    if (wn.queue)
    {
        wn.queue->TraceConnectWithoutContext("DropBeforeEnqueue", MakeBoundCallback(&QueueDropBefore, node));
        wn.queue->TraceConnectWithoutContext("Expired", MakeBoundCallback(&QueueExpired, node));
    }
    if (!ap)
    {
        mac->TraceConnectWithoutContext("Assoc", MakeBoundCallback(&Assoc, node));
        mac->TraceConnectWithoutContext("DeAssoc", MakeBoundCallback(&DeAssoc, node));
    }
    return true;
}

// ------------------------------------------------------------------------------------------------
// IPv4 transmissions of the end hosts: tag each with a fresh packet id and log its identity

// "SendOutgoing" hands over the very packet IPv4 sends (its "Tx" trace a copy): FlowMonitor tags
// packets at the same place.  The payload has no IP header yet; its identity comes from the header.
static void
IpSend(int node, const Ipv4Header& h, Ptr<const Packet> p, uint32_t iface)
{
    static FILE* f = Log("ip_tx", "t_ns,node,pid,ip_id,src,dst,proto,sport,dport,seq,payload,ip_len,tcp_flags");
    PidTag t;
    t.id = g_nextPid++;
    p->AddByteTag(t);
    if (!f)
    {
        return;
    }
    uint8_t b[80];
    Buffer hb;
    hb.AddAtStart(h.GetSerializedSize());
    h.Serialize(hb.Begin());
    uint32_t hl = h.GetSerializedSize();
    hb.CopyData(b, hl);
    uint32_t n = p->GetSize() < 60 ? p->GetSize() : 60;
    p->CopyData(b + hl, n);
    Ident id = ParseIp(b, hl + n, 0, 0x0800);
    id.ipLen = hl + p->GetSize();
    if (id.proto == 6 && id.payload >= 0)
    {
        uint32_t doff = (b[hl + 12] >> 4) * 4;
        id.payload = static_cast<long>(p->GetSize()) - doff;
    }
    else if (id.proto == 17)
    {
        id.payload = static_cast<long>(p->GetSize()) - 8;
    }
    std::fprintf(f, "%lld,%d,%llu,", static_cast<long long>(NowNs()), node, static_cast<unsigned long long>(t.id));
    LogIdent(f, id);
}

bool
HookIp(Ptr<Node> n)
{
    Ptr<Ipv4L3Protocol> ip = n->GetObject<Ipv4L3Protocol>();
    if (!ip)
    {
        return false;
    }
    ip->TraceConnectWithoutContext("SendOutgoing", MakeBoundCallback(&IpSend, static_cast<int>(n->GetId())));
    return true;
}

// ------------------------------------------------------------------------------------------------
// TCP: segments, RTO expirations, congestion states, and tcp_info-style samples

// Protected members of TcpSocketBase, read through pointers to members formed in a derived class.
struct TcpPeek : public TcpSocketBase
{
    static Ptr<TcpSocketState> Tcb(TcpSocketBase* s) { return s->*(&TcpPeek::m_tcb); }
    static Ptr<RttEstimator> Rtt(TcpSocketBase* s) { return s->*(&TcpPeek::m_rtt); }
    static Time Rto(TcpSocketBase* s) { return (s->*(&TcpPeek::m_rto)).Get(); }
    static uint32_t RetrCount(TcpSocketBase* s) { return s->*(&TcpPeek::m_dataRetrCount); }
    static uint32_t Retries(TcpSocketBase* s) { return s->*(&TcpPeek::m_dataRetries); }
    static Ipv4EndPoint* Ep(TcpSocketBase* s) { return s->*(&TcpPeek::m_endPoint); }
    static int State(TcpSocketBase* s) { return static_cast<int>((s->*(&TcpPeek::m_state)).Get()); }
    static Ptr<TcpCongestionOps> Cc(TcpSocketBase* s) { return s->*(&TcpPeek::m_congestionControl); }
    static bool Sack(TcpSocketBase* s) { return s->*(&TcpPeek::m_sackEnabled); }
    static bool Ts(TcpSocketBase* s) { return s->*(&TcpPeek::m_timestampEnabled); }
    static bool Ws(TcpSocketBase* s) { return s->*(&TcpPeek::m_winScalingEnabled); }
    static uint8_t SndShift(TcpSocketBase* s) { return s->*(&TcpPeek::m_sndWindShift); }
    static uint8_t RcvShift(TcpSocketBase* s) { return s->*(&TcpPeek::m_rcvWindShift); }
    static uint32_t HighRxAck(TcpSocketBase* s) { return (s->*(&TcpPeek::m_highRxAckMark)).Get().GetValue(); }
    static uint32_t RWnd(TcpSocketBase* s) { return (s->*(&TcpPeek::m_rWnd)).Get(); }
};

struct SockInfo
{
    Ptr<TcpSocketBase> s;
    int node = -1;
    bool haveIsn = false;
    uint32_t isn = 0;
    uint32_t sndMax = 0; // highest sequence sent + 1, relative to isn
    unsigned long long bytesSent = 0, bytesRetrans = 0, segsOut = 0, dataSegsOut = 0;
    unsigned long long retransTotal = 0, rtoTotal = 0;
};

static std::vector<SockInfo> g_socks;
static std::vector<std::pair<Ptr<Node>, int>> g_tcpNodes;

static FILE*
TcpLog()
{
    static FILE* f = Log("tcp", "t_ns,sock,kind,seq,len,flags,retx,cwnd,ssthresh,rto_ns,inflight,a,b");
    return f;
}

static void
TcpEvent(int id, const char* kind, long long seq, long long len, int flags, int retx, long long a,
         long long b)
{
    FILE* f = TcpLog();
    if (!f)
    {
        return;
    }
    TcpSocketBase* s = PeekPointer(g_socks.at(id).s);
    auto tcb = TcpPeek::Tcb(s);
    std::fprintf(f,
                 "%lld,%d,%s,%lld,%lld,%d,%d,%u,%u,%lld,%u,%lld,%lld\n",
                 static_cast<long long>(NowNs()),
                 id,
                 kind,
                 seq,
                 len,
                 flags,
                 retx,
                 tcb->m_cWnd.Get(),
                 tcb->m_ssThresh.Get(),
                 static_cast<long long>(TcpPeek::Rto(s).GetNanoSeconds()),
                 tcb->m_bytesInFlight.Get(),
                 a,
                 b);
}

static void
TcpTx(int id, Ptr<const Packet> p, const TcpHeader& h, Ptr<const TcpSocketBase> sock)
{
    SockInfo& si = g_socks.at(id);
    uint32_t seq = h.GetSequenceNumber().GetValue();
    uint32_t len = p->GetSize();
    uint8_t flags = h.GetFlags();
    if ((flags & TcpHeader::SYN) && !si.haveIsn)
    {
        si.haveIsn = true;
        si.isn = seq;
        si.sndMax = 1;
    }
    ++si.segsOut;
    int retx = 0;
    if (len > 0 && !si.haveIsn)
    {
        // Hooked just after Connect(), the SYN is gone: the first data segment is ISN + 1.
        si.haveIsn = true;
        si.isn = seq - 1;
        si.sndMax = 1;
    }
    if (len > 0)
    {
        ++si.dataSegsOut;
        si.bytesSent += len;
        uint32_t rel = seq - si.isn;
        if (si.haveIsn && static_cast<int32_t>(rel - si.sndMax) < 0)
        {
            retx = 1;
            ++si.retransTotal;
            si.bytesRetrans += len;
        }
        if (static_cast<int32_t>(rel + len - si.sndMax) > 0)
        {
            si.sndMax = rel + len;
        }
    }
    if (len > 0 || (flags & (TcpHeader::SYN | TcpHeader::FIN)))
    {
        TcpEvent(id, "tx", seq, len, flags, retx, 0, 0);
    }
}

static void
TcpRto(int id, Time oldRto, Time newRto)
{
    // RFC 6298 5.5 backoff in TcpSocketBase::ReTxTimeout: m_rto doubles (capped at 60 s) after the
    // remaining-retries counter was decremented.  RTT samples also change m_rto, but never while
    // that counter is below its maximum and never to exactly twice the old value.
    TcpSocketBase* s = PeekPointer(g_socks.at(id).s);
    uint32_t left = TcpPeek::RetrCount(s);
    uint32_t max = TcpPeek::Retries(s);
    Time doubled = Min(oldRto + oldRto, Seconds(60));
    if (left < max && newRto == doubled)
    {
        ++g_socks.at(id).rtoTotal;
        TcpEvent(id, "rto", -1, -1, 0, 0, oldRto.GetNanoSeconds(), static_cast<long long>(max - left));
    }
}

static void
TcpCong(int id, TcpSocketState::TcpCongState_t oldState, TcpSocketState::TcpCongState_t newState)
{
    TcpEvent(id, "cong", -1, -1, 0, 0, static_cast<long long>(oldState), static_cast<long long>(newState));
}

static FILE*
SockLog()
{
    static FILE* f = Log("sockets", "sock,node,t_ns,src,sport,dst,dport");
    return f;
}

static void
HookSockets(Ptr<Node> node, int nodeIdx)
{
    Ptr<TcpL4Protocol> tcp = node->GetObject<TcpL4Protocol>();
    if (!tcp)
    {
        return;
    }
    ObjectVectorValue v;
    tcp->GetAttribute("SocketList", v);
    for (auto it = v.Begin(); it != v.End(); ++it)
    {
        Ptr<TcpSocketBase> s = DynamicCast<TcpSocketBase>(it->second);
        if (!s)
        {
            continue;
        }
        bool known = false;
        for (const auto& si : g_socks)
        {
            known = known || si.s == s;
        }
        Ipv4EndPoint* ep = TcpPeek::Ep(PeekPointer(s));
        if (known || !ep || TcpPeek::State(PeekPointer(s)) == TcpSocket::LISTEN)
        {
            continue;
        }
        int id = static_cast<int>(g_socks.size());
        SockInfo si;
        si.s = s;
        si.node = nodeIdx;

        g_socks.push_back(si);
        s->TraceConnectWithoutContext("Tx", MakeBoundCallback(&TcpTx, id));
        s->TraceConnectWithoutContext("RTO", MakeBoundCallback(&TcpRto, id));
        s->TraceConnectWithoutContext("CongState", MakeBoundCallback(&TcpCong, id));
        if (FILE* f = SockLog())
        {
            std::ostringstream src, dst;
            ep->GetLocalAddress().Print(src);
            ep->GetPeerAddress().Print(dst);
            std::fprintf(f, "%d,%d,%lld,%s,%u,%s,%u\n", id, nodeIdx, static_cast<long long>(NowNs()),
                         src.str().c_str(), ep->GetLocalPort(), dst.str().c_str(), ep->GetPeerPort());
        }
    }
}

// Hook every socket of `node` at `atS` seconds (schedule it just after an application's start:
// BulkSend creates and connects its socket in StartApplication).
void
ScheduleTcpHook(Ptr<Node> node, int nodeIdx, double atS)
{
    Simulator::Schedule(Seconds(atS), &HookSockets, node, nodeIdx);
}

static const char* TCP_STATE_NAMES[] = {"UNCONN", "LISTEN", "SYN-SENT", "SYN-RECV", "ESTAB",
                                        "CLOSE-WAIT", "LAST-ACK", "FIN-WAIT-1", "FIN-WAIT-2",
                                        "CLOSING", "TIME-WAIT"};

struct Sampler
{
    FILE* f = nullptr;
    Time interval;
    int clock = -1;
    int node = -1;
    unsigned long long samples = 0;
};

static Sampler g_sampler;

static void
Sample()
{
    if (!g_sampler.f)
    {
        return;
    }
    int64_t ts = g_sampler.clock >= 0 ? g_clocks.at(g_sampler.clock).Ideal(NowNs()) : NowNs();
    for (auto& si : g_socks)
    {
        if (g_sampler.node >= 0 && si.node != g_sampler.node)
        {
            continue;
        }
        TcpSocketBase* s = PeekPointer(si.s);
        Ipv4EndPoint* ep = TcpPeek::Ep(s);
        int st = TcpPeek::State(s);
        if (!ep || st == TcpSocket::CLOSED)
        {
            continue;
        }
        auto tcb = TcpPeek::Tcb(s);
        auto rtt = TcpPeek::Rtt(s);
        uint32_t mss = tcb->m_segmentSize ? tcb->m_segmentSize : 1;
        uint32_t ss = tcb->m_ssThresh.Get();
        long long ssSeg = ss >= 0x7FFFFFFFu ? 0x7FFFFFFFLL : static_cast<long long>(ss / mss);
        uint32_t inflight = tcb->m_bytesInFlight.Get();
        Ptr<TcpTxBuffer> tx = s->GetTxBuffer();
        uint32_t notsent = tx->SizeFromSequence(tcb->m_nextTxSequence.Get());
        long long acked = 0;
        if (si.haveIsn)
        {
            int32_t d = static_cast<int32_t>(TcpPeek::HighRxAck(s) - si.isn - 1);
            acked = d > 0 ? d : 0;
        }
        Time minRtt = tcb->m_minRtt;
        // ns-3 names congestion controls after their classes (TcpCubic); ss prints Linux's names.
        std::string cc = TcpPeek::Cc(s) ? TcpPeek::Cc(s)->GetName() : "";
        if (cc.rfind("Tcp", 0) == 0)
        {
            cc = cc.substr(3);
        }
        for (auto& ch : cc)
        {
            ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
        if (cc == "newreno")
        {
            cc = "reno";
        }
        int options = (TcpPeek::Ts(s) ? 1 : 0) | (TcpPeek::Sack(s) ? 2 : 0) | (TcpPeek::Ws(s) ? 4 : 0);
        std::ostringstream src, dst;
        ep->GetLocalAddress().Print(src);
        ep->GetPeerAddress().Print(dst);
        uint32_t backoff = TcpPeek::Retries(s) - TcpPeek::RetrCount(s);
        std::fprintf(
            g_sampler.f,
            "{\"ts_ns\":%lld,\"src\":\"%s\",\"sport\":%u,\"dst\":\"%s\",\"dport\":%u,\"state\":\"%s\","
            "\"cc\":\"%s\",\"tcpi_snd_cwnd\":%u,\"tcpi_snd_ssthresh\":%lld,\"tcpi_rtt\":%lld,"
            "\"tcpi_rttvar\":%lld,\"tcpi_rto\":%lld,\"tcpi_snd_mss\":%u,\"tcpi_advmss\":%u,"
            "\"tcpi_unacked\":%u,\"tcpi_retrans\":%u,\"tcpi_lost\":%u,\"tcpi_sacked\":%u,"
            "\"tcpi_total_retrans\":%llu,\"tcpi_bytes_sent\":%llu,\"tcpi_bytes_retrans\":%llu,"
            "\"tcpi_bytes_acked\":%lld,\"tcpi_segs_out\":%llu,\"tcpi_data_segs_out\":%llu,"
            "\"tcpi_notsent_bytes\":%u,\"tcpi_snd_wnd\":%u,\"tcpi_ca_state\":%d,\"tcpi_backoff\":%u,"
            "\"tcpi_retransmits\":%u,\"tcpi_total_rto\":%llu,\"tcpi_options\":%d,"
            "\"tcpi_snd_wscale\":%u,\"tcpi_rcv_wscale\":%u%s,\"bytes_in_flight\":%u,"
            "\"snd_cwnd_bytes\":%u}\n",
            static_cast<long long>(ts),
            src.str().c_str(),
            ep->GetLocalPort(),
            dst.str().c_str(),
            ep->GetPeerPort(),
            st >= 0 && st <= 10 ? TCP_STATE_NAMES[st] : "UNCONN",
            cc.c_str(),
            tcb->m_cWnd.Get() / mss,
            ssSeg,
            static_cast<long long>(rtt->GetEstimate().GetMicroSeconds()),
            static_cast<long long>(rtt->GetVariation().GetMicroSeconds()),
            static_cast<long long>(TcpPeek::Rto(s).GetMicroSeconds()),
            mss,
            mss,
            (inflight + mss - 1) / mss,
            tx->GetRetransmitsCount(),
            tx->GetLost(),
            tx->GetSacked(),
            si.retransTotal,
            si.bytesSent,
            si.bytesRetrans,
            acked,
            si.segsOut,
            si.dataSegsOut,
            notsent,
            TcpPeek::RWnd(s),
            static_cast<int>(tcb->m_congState.Get()),
            backoff,
            backoff,
            si.rtoTotal,
            options,
            TcpPeek::SndShift(s),
            TcpPeek::RcvShift(s),
            minRtt == Time::Max()
                ? ""
                : (",\"tcpi_min_rtt\":" + std::to_string(minRtt.GetMicroSeconds())).c_str(),
            inflight,
            tcb->m_cWnd.Get());
        ++g_sampler.samples;
    }
    Simulator::Schedule(g_sampler.interval, &Sample);
}

bool
StartSampler(const std::string& path, int node, double startS, double intervalS, int clock)
{
    g_sampler.f = std::fopen(path.c_str(), "w");
    if (!g_sampler.f)
    {
        return false;
    }
    std::setvbuf(g_sampler.f, nullptr, _IOFBF, 1 << 16);
    g_sampler.interval = Seconds(intervalS);
    g_sampler.clock = clock;
    g_sampler.node = node;
    Simulator::Schedule(Seconds(startS), &Sample);
    return true;
}

unsigned long long
SamplerRows()
{
    return g_sampler.samples;
}

// ------------------------------------------------------------------------------------------------
// injections

static std::vector<Ptr<Object>> g_keep;

static void
SetErrorModel(Ptr<RateErrorModel> em, bool on, int node)
{
    if (on)
    {
        em->Enable();
    }
    else
    {
        em->Disable();
    }
    MacEvent(node, on ? "deaf_on" : "deaf_off", 0, 0, 0);
}

// The station decodes nothing between startS and endS (a receiver-side burst of interference).
bool
ScheduleDeaf(Ptr<NetDevice> nd, int node, double startS, double endS)
{
    auto dev = DynamicCast<WifiNetDevice>(nd);
    if (!dev)
    {
        return false;
    }
    Ptr<RateErrorModel> em = CreateObject<RateErrorModel>();
    em->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
    em->SetRate(1.0);
    em->Disable();
    dev->GetPhy()->SetPostReceptionErrorModel(em);
    g_keep.push_back(em);
    Simulator::Schedule(Seconds(startS), &SetErrorModel, em, true, node);
    Simulator::Schedule(Seconds(endS), &SetErrorModel, em, false, node);
    return true;
}

// A hidden node: a device outside the BSS that sends `size`-byte frames to its peer every `gap`
// from its start to its end (more than the air carries: it transmits whenever its CSMA lets it),
// then puts its PHY to sleep so nothing it still holds goes out after the end.
struct Interferer
{
    Ptr<WifiNetDevice> dev;
    Address peer;
    uint32_t size = 1000;
    Time gap;
    Time end;
    int node = -1;
    unsigned long long sent = 0;
};

static std::vector<Interferer> g_intf;

static void
InterfererTx(int node, WifiConstPsduMap psduMap, WifiTxVector txVector, double txPowerW)
{
    static FILE* f = Log("interferer", "t_ns,node,fc,size,rate_bps,dur_ns");
    if (!f)
    {
        return;
    }
    // interferers are 802.11g
    int64_t dur = WifiPhy::CalculateTxDuration(psduMap, txVector, WIFI_PHY_BAND_2_4GHZ).GetNanoSeconds();
    for (const auto& [staId, psdu] : psduMap)
    {
        std::fprintf(f,
                     "%lld,%d,%u,%u,%llu,%lld\n",
                     static_cast<long long>(NowNs()),
                     node,
                     HdrPeek::Fc(psdu->GetHeader(0)),
                     static_cast<unsigned>(psdu->GetSize()),
                     static_cast<unsigned long long>(txVector.GetMode(staId).GetDataRate(txVector, staId)),
                     static_cast<long long>(dur));
        break;   // one row per PPDU: its airtime counts once
    }
}

static void
InterfererSend(size_t i)
{
    Interferer& it = g_intf.at(i);
    if (Simulator::Now() >= it.end)
    {
        it.dev->GetPhy()->SetSleepMode();
        MacEvent(it.node, "hidden_off", 0, static_cast<long long>(it.sent), 0);
        return;
    }
    if (it.sent == 0)
    {
        MacEvent(it.node, "hidden_on", 0, 0, 0);
    }
    it.dev->Send(Create<Packet>(it.size), it.peer, 0x88B5);   // IEEE local experimental EtherType
    ++it.sent;
    Simulator::Schedule(it.gap, &InterfererSend, i);
}

// Interferer `nd` (node `node`) sends frames to `peerDev` (or to everyone: `broadcast`) from startS
// to endS; both devices' PPDUs are logged (interferer.csv) so the truth can give its airtime.
bool
AddInterferer(Ptr<NetDevice> nd, Ptr<NetDevice> peerDev, int node, int peerNode, double startS, double endS,
              double pps, unsigned size, bool broadcast)
{
    auto dev = DynamicCast<WifiNetDevice>(nd);
    auto peer = DynamicCast<WifiNetDevice>(peerDev);
    if (!dev || !peer || pps <= 0.0 || endS <= startS)
    {
        return false;
    }
    Interferer it;
    it.dev = dev;
    // broadcast: no ACK, so no retry and no growing backoff (its peer's reception does not matter)
    it.peer = broadcast ? Address(Mac48Address::GetBroadcast()) : peer->GetAddress();
    it.size = size;
    it.gap = Seconds(1.0 / pps);
    it.end = Seconds(endS);
    it.node = node;
    g_intf.push_back(it);
    dev->GetPhy()->TraceConnectWithoutContext("PhyTxPsduBegin", MakeBoundCallback(&InterfererTx, node));
    peer->GetPhy()->TraceConnectWithoutContext("PhyTxPsduBegin", MakeBoundCallback(&InterfererTx, peerNode));
    Simulator::Schedule(Seconds(startS), &InterfererSend, g_intf.size() - 1);
    return true;
}

unsigned long long
InterfererSent(int i)
{
    return i >= 0 && static_cast<size_t>(i) < g_intf.size() ? g_intf[i].sent : 0;
}

static void
SetVelocity(Ptr<Node> n, Vector v, int node)
{
    Ptr<ConstantVelocityMobilityModel> m = n->GetObject<ConstantVelocityMobilityModel>();
    if (m)
    {
        m->SetVelocity(v);
    }
    MacEvent(node, "walk", 0, std::llround(v.x * 1000), std::llround(v.y * 1000));
}

void
ScheduleVelocity(Ptr<Node> n, int node, double atS, double vx, double vy)
{
    Simulator::Schedule(Seconds(atS), &SetVelocity, n, Vector(vx, vy, 0.0), node);
}

unsigned long long
SinkRx(Ptr<Application> a)
{
    auto s = DynamicCast<PacketSink>(a);
    return s ? s->GetTotalRx() : 0;
}

// ------------------------------------------------------------------------------------------------
// several APs bridged onto one LAN (the roaming scenario)

// A permanent ARP entry in `n`'s interface 1 for `peer`'s interface 1: no address resolution, as
// NeighborCacheHelper gives the one-AP world (it stops at a channel's edge, so not across bridges).
bool
StaticArp(Ptr<Node> n, Ptr<Node> peer)
{
    Ptr<Ipv4L3Protocol> a = n->GetObject<Ipv4L3Protocol>();
    Ptr<Ipv4L3Protocol> b = peer->GetObject<Ipv4L3Protocol>();
    if (!a || !b || a->GetNInterfaces() < 2 || b->GetNInterfaces() < 2)
    {
        return false;
    }
    Ptr<ArpCache> cache = a->GetInterface(1)->GetArpCache();
    if (!cache)
    {
        return false;
    }
    ArpCache::Entry* e = cache->Add(b->GetAddress(1, 0).GetLocal());
    e->SetMacAddress(b->GetInterface(1)->GetDevice()->GetAddress());
    e->MarkPermanent();
    return true;
}

// A gratuitous ARP request (sender and target: the station's own address, to broadcast), as a
// station announces itself after joining a BSS: the bridges between the APs and the server learn
// which AP's port leads to it (else they keep sending its packets to the AP it left).
static void
SendGratuitousArp(Ptr<WifiNetDevice> dev, Ipv4Address ip)
{
    Ptr<Packet> p = Create<Packet>();
    ArpHeader arp;
    Mac48Address self = Mac48Address::ConvertFrom(dev->GetAddress());
    arp.SetRequest(self, ip, Mac48Address::GetBroadcast(), ip);
    p->AddHeader(arp);
    dev->Send(p, Mac48Address::GetBroadcast(), ArpL3Protocol::PROT_NUMBER);
}

static void
AnnounceOnAssoc(Ptr<WifiNetDevice> dev, Ipv4Address ip, Mac48Address bssid)
{
    Simulator::ScheduleNow(&SendGratuitousArp, dev, ip);
}

bool
AnnounceAfterAssociation(Ptr<NetDevice> nd, Ptr<Node> n)
{
    auto dev = DynamicCast<WifiNetDevice>(nd);
    Ptr<Ipv4L3Protocol> ip = n->GetObject<Ipv4L3Protocol>();
    if (!dev || !ip || ip->GetNInterfaces() < 2)
    {
        return false;
    }
    dev->GetMac()->TraceConnectWithoutContext(
        "Assoc", MakeBoundCallback(&AnnounceOnAssoc, dev, ip->GetAddress(1, 0).GetLocal()));
    return true;
}

// ------------------------------------------------------------------------------------------------

void
CloseAll()
{
    g_air.out.Close();
    for (auto& w : g_wired)
    {
        w.out.Close();
    }
    g_client.out.Close();
    if (g_sampler.f)
    {
        std::fclose(g_sampler.f);
        g_sampler.f = nullptr;
    }
    for (auto& [name, f] : g_logs)
    {
        if (f)
        {
            std::fclose(f);
        }
        f = nullptr;
    }
}

} // namespace xlsim
