// A CPU stand-in for libnvidia-ml.so.1 (NVML), for tests only (never built into or shipped
// with tune). It implements the NVML calls tune makes through nvml-wrapper 0.13 (which
// resolves each symbol only when it is called), for the driver stand-in's devices
// (TUNE_CUDA_STANDIN_DEVICES, the same name and UUIDs as cuda.cpp).
//
// What it reports comes from what the driver stand-in really did: every process using it
// publishes per device its busy time, live allocations, PCIe bytes and whether it holds
// the primary context (activity.h, files under TUNE_STANDIN_ACTIVITY_DIR), and this
// library sums the live processes' files. So utilisation, memory used and the process
// table follow the real work of a trial or job, DP's heavier device 0 included.
//
// Stated models (not measurements; every figure is the stand-in's, never a GPU's):
//   utilisation   busy time of the device's streams / wall time since the previous read
//                 (NVML: share of the sample period a kernel ran), summed over processes,
//                 capped at 100; memory utilisation the same over copies and memsets;
//   power         70 W idle + (700 W - 70 W) * utilisation (an H100 SXM's idle and TDP),
//                 capped at the power limit (default 700 W), which sets sw_power_cap;
//   energy        the power above integrated up to the moment of each counter read (mJ
//                 since this process first read the device), a read inside a window at
//                 the power last reported: the counter never lags a read by a window,
//                 never falls, and its slope never exceeds the power limit;
//   temperature   30 C + 0.5 C per utilisation point; SM clock 1980 MHz (max 1980);
//   throttle      gpu_idle when utilisation is 0, sw_power_cap when capped.
//
// Scriptable per test through the file named by TUNE_NVML_STANDIN_SCRIPT, re-read when it
// changes, one setting a line (`#` comments):
//   gpu <i> throttle <names or 0xbits, comma-separated>   added to the reasons above
//   gpu <i> sm_clock_mhz <n> | temp_c <n> | power_limit_w <n>
//   gpu <i> pcie_tx_kbps <n> | pcie_rx_kbps <n>           instead of the copies' rate
//   gpu <i> process <pid> <bytes> <sm_pct>                 a foreign process on the GPU
//   gpu <i> energy_counter absent                          the counter is NOT_SUPPORTED
//   gpu <i> ecc <corrected> <uncorrected>                  volatile ECC errors accrue at
//                                                          these rates per second the
//                                                          device is busy (default 0)
//   gpu <i> xid <code>                                     a critical XID event with this
//                                                          code each time an event set is
//                                                          read after the device was busy
// A bad line is one line on stderr naming the file and line, and is ignored.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "activity.h"

#define API extern "C" __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    SUCCESS = 0,
    ERR_UNINITIALIZED = 1,
    ERR_INVALID_ARGUMENT = 2,
    ERR_NOT_SUPPORTED = 3,
    ERR_NOT_FOUND = 6,
    ERR_INSUFFICIENT_SIZE = 7,
    ERR_UNKNOWN = 999,
};

static const char* DEVICE_NAME = "tune CPU stand-in (not a GPU)";
static const char* DRIVER_VERSION = "tune NVML stand-in (not a driver)";
static const unsigned long long TOTAL_MEM = 80ull << 30;
static const double IDLE_W = 70.0, MAX_W = 700.0;
static const unsigned MAX_SM_MHZ = 1980, MEM_MHZ = 2619, VIDEO_MHZ = 1755;
static const uint64_t MIN_WINDOW_NS = 50000000;  // reads closer than this share a window (a tick's reads)

static const unsigned long long REASON_IDLE = 0x1, REASON_SW_POWER_CAP = 0x4;

static void say(const char* msg) { fprintf(stderr, "tune NVML stand-in: %s\n", msg); }

static int device_count() {
    static int n = [] {
        const char* v = getenv("TUNE_CUDA_STANDIN_DEVICES");
        if (!v) return 1;
        char* end = nullptr;
        long k = strtol(v, &end, 10);
        // The driver stand-in says so when it is not an integer in 1..=8; both fall back to 1.
        return (end == v || *end != '\0' || k < 1 || k > TUNE_ACT_DEVICES) ? 1 : (int)k;
    }();
    return n;
}

static uint64_t now_ns() {
    return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
static unsigned long long wall_us() {
    return (unsigned long long)std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// ---- the script ---------------------------------------------------------------------------

struct Foreign {
    unsigned pid;
    unsigned long long bytes;
    unsigned sm_pct;
};
struct Script {
    unsigned long long throttle = 0;
    long sm_clock = -1, temp = -1, power_limit_w = -1, tx = -1, rx = -1;
    bool no_energy = false;
    long ecc_c = 0, ecc_u = 0, xid = -1;
    std::vector<Foreign> foreign;
};

static const struct {
    const char* name;
    unsigned long long bit;
} REASONS[] = {
    {"gpu_idle", 0x1},           {"applications_clocks_setting", 0x2},
    {"sw_power_cap", 0x4},       {"hw_slowdown", 0x8},
    {"sync_boost", 0x10},        {"sw_thermal_slowdown", 0x20},
    {"hw_thermal_slowdown", 0x40}, {"hw_power_brake_slowdown", 0x80},
    {"display_clock_setting", 0x100},
};

static bool parse_reasons(const std::string& v, unsigned long long* out) {
    size_t at = 0;
    while (at <= v.size()) {
        size_t end = v.find(',', at);
        if (end == std::string::npos) end = v.size();
        std::string w = v.substr(at, end - at);
        bool found = false;
        for (auto& r : REASONS)
            if (w == r.name) {
                *out |= r.bit;
                found = true;
            }
        if (!found) {
            char* e = nullptr;
            unsigned long long b = strtoull(w.c_str(), &e, 0);
            if (w.empty() || *e) return false;
            *out |= b;
        }
        at = end + 1;
    }
    return true;
}

static bool parse_num(const char* s, long* out) {
    char* e = nullptr;
    long v = strtol(s, &e, 10);
    if (!*s || *e || v < 0) return false;
    *out = v;
    return true;
}

static std::mutex g_mu;  // everything below
static std::vector<Script> g_script(TUNE_ACT_DEVICES);
static std::string g_script_seen;  // the text last parsed

static void load_script() {
    const char* path = getenv("TUNE_NVML_STANDIN_SCRIPT");
    if (!path || !*path) return;
    std::string text;
    if (FILE* f = fopen(path, "r")) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
        fclose(f);
    }
    if (text == g_script_seen) return;
    g_script_seen = text;
    std::vector<Script> s(TUNE_ACT_DEVICES);
    int line_no = 0;
    size_t at = 0;
    while (at < text.size()) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(at, end - at);
        at = end + 1;
        ++line_no;
        if (size_t h = line.find('#'); h != std::string::npos) line.resize(h);
        std::vector<std::string> w;
        char* save = nullptr;
        for (char* t = strtok_r(line.data(), " \t\r", &save); t; t = strtok_r(nullptr, " \t\r", &save))
            w.emplace_back(t);
        if (w.empty()) continue;
        long gpu = -1, a = 0, b = 0, c = 0;
        bool ok = w.size() >= 4 && w[0] == "gpu" && parse_num(w[1].c_str(), &gpu) &&
                  gpu < device_count();
        if (ok) {
            Script& g = s[(size_t)gpu];
            const std::string& k = w[2];
            if (k == "throttle" && w.size() == 4) ok = parse_reasons(w[3], &g.throttle);
            else if (k == "sm_clock_mhz" && w.size() == 4) ok = parse_num(w[3].c_str(), &g.sm_clock);
            else if (k == "temp_c" && w.size() == 4) ok = parse_num(w[3].c_str(), &g.temp);
            else if (k == "power_limit_w" && w.size() == 4) ok = parse_num(w[3].c_str(), &g.power_limit_w);
            else if (k == "pcie_tx_kbps" && w.size() == 4) ok = parse_num(w[3].c_str(), &g.tx);
            else if (k == "pcie_rx_kbps" && w.size() == 4) ok = parse_num(w[3].c_str(), &g.rx);
            else if (k == "energy_counter" && w.size() == 4 && w[3] == "absent") g.no_energy = true;
            else if (k == "ecc" && w.size() == 5)
                ok = parse_num(w[3].c_str(), &g.ecc_c) && parse_num(w[4].c_str(), &g.ecc_u);
            else if (k == "xid" && w.size() == 4) ok = parse_num(w[3].c_str(), &g.xid);
            else if (k == "process" && w.size() == 6 && parse_num(w[3].c_str(), &a) &&
                     parse_num(w[4].c_str(), &b) && parse_num(w[5].c_str(), &c) && c <= 100)
                g.foreign.push_back({(unsigned)a, (unsigned long long)b, (unsigned)c});
            else ok = false;
        }
        if (!ok) {
            char msg[512];
            snprintf(msg, sizeof msg,
                     "%s:%d: not a setting (gpu <i below %d> throttle|sm_clock_mhz|temp_c|"
                     "power_limit_w|pcie_tx_kbps|pcie_rx_kbps|process|energy_counter|ecc|xid ...); ignored",
                     path, line_no, device_count());
            say(msg);
        }
    }
    g_script = s;
}

// ---- the publishers: live processes' activity files ----------------------------------------

struct Publisher {
    const TuneActFile* f = nullptr;
};
static std::map<unsigned, Publisher> g_pubs;  // by pid, mapped once

static bool alive(unsigned pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    FILE* f = fopen(path, "r");
    if (!f) return false;
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char* close = strrchr(buf, ')');  // the state follows the command name
    return close && close[1] == ' ' && close[2] != 'Z' && close[2] != 'X';
}

static void scan_publishers() {
    const char* dir = getenv(TUNE_ACT_ENV);
    std::map<unsigned, bool> seen;
    if (DIR* d = dir ? opendir(dir) : nullptr) {
        while (dirent* e = readdir(d)) {
            unsigned pid = 0;
            char tail[8] = {0};
            if (sscanf(e->d_name, "cuda-%u.%7s", &pid, tail) != 2 || strcmp(tail, "act")) continue;
            if (!alive(pid)) continue;
            seen[pid] = true;
            if (g_pubs.count(pid)) continue;
            std::string p = std::string(dir) + "/" + e->d_name;
            int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            struct stat st;
            void* m = MAP_FAILED;
            if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(TuneActFile))
                m = mmap(nullptr, sizeof(TuneActFile), PROT_READ, MAP_SHARED, fd, 0);
            close(fd);
            if (m == MAP_FAILED) continue;
            g_pubs[pid].f = (const TuneActFile*)m;
        }
        closedir(d);
    }
    for (auto it = g_pubs.begin(); it != g_pubs.end();) {
        if (seen.count(it->first)) {
            ++it;
        } else {
            munmap((void*)it->second.f, sizeof(TuneActFile));
            it = g_pubs.erase(it);
        }
    }
}

// ---- per device: the last window -------------------------------------------------------------

struct ProcNow {
    unsigned pid;
    unsigned long long bytes;
    unsigned sm, mem;
};
struct Prev {
    uint64_t busy = 0, mem_busy = 0, h2d = 0, d2h = 0;
};
struct Dev {
    int index = -1;
    uint64_t last_ns = 0;
    std::map<unsigned, Prev> prev;
    double util = 0, mem_util = 0, tx_kbps = 0, rx_kbps = 0, power_w = IDLE_W, energy_mj = 0;
    uint64_t energy_ns = 0;  // the counter holds the energy up to here
    bool capped = false;
    unsigned long long mem_used = 0;
    unsigned long long sample_ts = 0;
    std::vector<ProcNow> procs;
    uint64_t busy_total_ns = 0, xid_mark_ns = 0;  // tune's own work, all reads so far
    double ecc_c = 0, ecc_u = 0;
};
static Dev g_devs[TUNE_ACT_DEVICES];
static bool g_init = false;

static uint64_t delta(uint64_t cur, uint64_t prev) { return cur >= prev ? cur - prev : cur; }

// Brings the energy counter up to `now` at the power last reported. A counter that only
// moved when a window closed lagged the reads by up to MIN_WINDOW_NS, so a short steady
// window read 705 W out of a 700 W device (CI, gpu_nvml's energy test).
static void accrue(Dev& d, uint64_t now) {
    if (d.energy_ns && now > d.energy_ns) d.energy_mj += d.power_w * (double)(now - d.energy_ns) / 1e6;
    d.energy_ns = now;
}

// Reads the publishers and closes the device's window (at most every MIN_WINDOW_NS).
static void refresh(Dev& d) {
    uint64_t now = now_ns();
    if (d.last_ns && now - d.last_ns < MIN_WINDOW_NS) return;
    load_script();
    scan_publishers();
    const Script& s = g_script[(size_t)d.index];
    uint64_t since = d.last_ns;
    if (!since) {  // the first read: each process's whole life so far
        since = now - MIN_WINDOW_NS;
        for (auto& [pid, p] : g_pubs)
            if (p.f->magic.load(std::memory_order_acquire) == TUNE_ACT_MAGIC && p.f->start_ns < since)
                since = p.f->start_ns;
    }
    double window_ns = (double)(now - since);
    uint64_t busy = 0, mem_busy = 0, h2d = 0, d2h = 0;
    unsigned long long used = 0;
    std::map<unsigned, Prev> next;
    std::vector<ProcNow> procs;
    for (auto& [pid, p] : g_pubs) {
        const TuneActFile* f = p.f;
        if (f->magic.load(std::memory_order_acquire) != TUNE_ACT_MAGIC || (int)f->ndev <= d.index)
            continue;
        const TuneActDev& a = f->dev[d.index];
        Prev cur{a.busy_ns.load(), a.mem_busy_ns.load(), a.h2d_bytes.load(), a.d2h_bytes.load()};
        Prev old = d.prev.count(pid) ? d.prev[pid] : Prev{};  // new since the last read: all of it
        next[pid] = cur;
        uint64_t b = delta(cur.busy, old.busy), mb = delta(cur.mem_busy, old.mem_busy);
        busy += b;
        mem_busy += mb;
        h2d += delta(cur.h2d, old.h2d);
        d2h += delta(cur.d2h, old.d2h);
        unsigned long long bytes = a.mem_bytes.load();
        used += bytes;
        if (a.ctx.load() || bytes)
            procs.push_back({pid, bytes, (unsigned)std::min(100.0, 100.0 * (double)b / window_ns),
                             (unsigned)std::min(100.0, 100.0 * (double)mb / window_ns)});
    }
    double util = 100.0 * (double)busy / window_ns;
    d.busy_total_ns += busy;
    d.ecc_c += (double)s.ecc_c * (double)busy / 1e9;
    d.ecc_u += (double)s.ecc_u * (double)busy / 1e9;
    for (const Foreign& f : s.foreign) {
        procs.push_back({f.pid, f.bytes, f.sm_pct, 0});
        used += f.bytes;
        util += f.sm_pct;
    }
    d.util = std::min(100.0, util);
    d.mem_util = std::min(100.0, 100.0 * (double)mem_busy / window_ns);
    double secs = window_ns / 1e9;
    d.tx_kbps = s.tx >= 0 ? (double)s.tx : (double)d2h / 1024.0 / secs;
    d.rx_kbps = s.rx >= 0 ? (double)s.rx : (double)h2d / 1024.0 / secs;
    double power = IDLE_W + (MAX_W - IDLE_W) * d.util / 100.0;
    double limit = s.power_limit_w >= 0 ? (double)s.power_limit_w : MAX_W;
    d.capped = power > limit;
    d.power_w = std::min(power, limit);
    accrue(d, now);  // the stretch since the last counter read, at this window's power
    d.mem_used = std::min(used, TOTAL_MEM);
    d.procs = procs;
    d.prev = next;
    d.sample_ts = wall_us();
    d.last_ns = now;
}

// ---- the API ---------------------------------------------------------------------------------

static Dev* dev_of(void* h) {
    for (int i = 0; i < device_count(); ++i)
        if (h == &g_devs[i]) return &g_devs[i];
    return nullptr;
}
#define DEVICE(h)                                      \
    std::lock_guard<std::mutex> lock_(g_mu);           \
    if (!g_init) return ERR_UNINITIALIZED;             \
    Dev* d = dev_of(h);                                \
    if (!d) return ERR_INVALID_ARGUMENT;               \
    refresh(*d);                                       \
    const Script& sc = g_script[(size_t)d->index];     \
    (void)sc

API nvmlReturn_t nvmlInit_v2() {
    std::lock_guard<std::mutex> g(g_mu);
    if (!getenv(TUNE_ACT_ENV) || !*getenv(TUNE_ACT_ENV)) {
        say(TUNE_ACT_ENV " is not set: no device activity to report (the tests set it)");
        return ERR_UNKNOWN;
    }
    for (int i = 0; i < TUNE_ACT_DEVICES; ++i) g_devs[i].index = i;
    g_init = true;
    return SUCCESS;
}
API nvmlReturn_t nvmlInit() { return nvmlInit_v2(); }
API nvmlReturn_t nvmlInitWithFlags(unsigned) { return nvmlInit_v2(); }
API nvmlReturn_t nvmlShutdown() { return SUCCESS; }

API const char* nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
        case SUCCESS: return "Success";
        case ERR_UNINITIALIZED: return "Uninitialized";
        case ERR_INVALID_ARGUMENT: return "Invalid Argument";
        case ERR_NOT_SUPPORTED: return "Not Supported";
        case ERR_NOT_FOUND: return "Not Found";
        case ERR_INSUFFICIENT_SIZE: return "Insufficient Size";
        default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_str(char* out, unsigned len, const char* s) {
    if (!out) return ERR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return ERR_INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1);
    return SUCCESS;
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned len) { return copy_str(v, len, DRIVER_VERSION); }
API nvmlReturn_t nvmlSystemGetNVMLVersion(char* v, unsigned len) { return copy_str(v, len, DRIVER_VERSION); }
API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
    if (!v) return ERR_INVALID_ARGUMENT;
    *v = 13000;
    return SUCCESS;
}
API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) { return nvmlSystemGetCudaDriverVersion_v2(v); }
API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n) {
    if (!n) return ERR_INVALID_ARGUMENT;
    if (!g_init) return ERR_UNINITIALIZED;
    *n = (unsigned)device_count();
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, void** h) {
    if (!h || i >= (unsigned)device_count()) return ERR_INVALID_ARGUMENT;
    if (!g_init) return ERR_UNINITIALIZED;
    *h = &g_devs[i];
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetIndex(void* h, unsigned* i) {
    Dev* d = dev_of(h);
    if (!d || !i) return ERR_INVALID_ARGUMENT;
    *i = (unsigned)d->index;
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetName(void* h, char* name, unsigned len) {
    if (!dev_of(h)) return ERR_INVALID_ARGUMENT;
    return copy_str(name, len, DEVICE_NAME);
}
// The driver stand-in's UUID bytes (0x5a..., the last the ordinal) in NVML's text form.
API nvmlReturn_t nvmlDeviceGetUUID(void* h, char* uuid, unsigned len) {
    Dev* d = dev_of(h);
    if (!d) return ERR_INVALID_ARGUMENT;
    char s[64];
    snprintf(s, sizeof s, "GPU-5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a%02x", d->index);
    return copy_str(uuid, len, s);
}
API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(void* h, int* major, int* minor) {
    if (!dev_of(h) || !major || !minor) return ERR_INVALID_ARGUMENT;
    *major = 9;
    *minor = 0;
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetP2PStatus(void* a, void* b, unsigned, int* status) {
    if (!dev_of(a) || !dev_of(b) || !status) return ERR_INVALID_ARGUMENT;
    *status = a != b ? 0 : 5;  // OK between distinct devices, as the driver stand-in's peers
    return SUCCESS;
}

struct Memory_v2 {
    unsigned version;
    unsigned long long total, reserved, free, used;
};
struct Memory_v1 {
    unsigned long long total, free, used;
};
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void* h, Memory_v2* m) {
    DEVICE(h);
    if (!m) return ERR_INVALID_ARGUMENT;
    m->total = TOTAL_MEM;
    m->reserved = 0;
    m->used = d->mem_used;
    m->free = TOTAL_MEM - d->mem_used;
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMemoryInfo(void* h, Memory_v1* m) {
    DEVICE(h);
    if (!m) return ERR_INVALID_ARGUMENT;
    m->total = TOTAL_MEM;
    m->used = d->mem_used;
    m->free = TOTAL_MEM - d->mem_used;
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetUtilizationRates(void* h, unsigned* u) {
    DEVICE(h);
    if (!u) return ERR_INVALID_ARGUMENT;
    u[0] = (unsigned)(d->util + 0.5);
    u[1] = (unsigned)(d->mem_util + 0.5);
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPowerUsage(void* h, unsigned* mw) {
    DEVICE(h);
    if (!mw) return ERR_INVALID_ARGUMENT;
    *mw = (unsigned)(d->power_w * 1000.0 + 0.5);
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(void* h, unsigned long long* mj) {
    DEVICE(h);
    if (!mj) return ERR_INVALID_ARGUMENT;
    if (sc.no_energy) return ERR_NOT_SUPPORTED;
    accrue(*d, now_ns());
    *mj = (unsigned long long)d->energy_mj;
    return SUCCESS;
}
static unsigned limit_mw(const Script& s) {
    return (unsigned)((s.power_limit_w >= 0 ? (double)s.power_limit_w : MAX_W) * 1000.0);
}
API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void* h, unsigned* mw) {
    DEVICE(h);
    if (!mw) return ERR_INVALID_ARGUMENT;
    *mw = limit_mw(sc);
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(void* h, unsigned* mw) {
    return nvmlDeviceGetEnforcedPowerLimit(h, mw);
}
static unsigned clock_of(unsigned type, long scripted_sm) {
    switch (type) {
        case 0:  // graphics
        case 1:  // SM
            return scripted_sm >= 0 ? (unsigned)scripted_sm : MAX_SM_MHZ;
        case 2: return MEM_MHZ;
        case 3: return VIDEO_MHZ;
        default: return 0;
    }
}
API nvmlReturn_t nvmlDeviceGetClockInfo(void* h, unsigned type, unsigned* mhz) {
    DEVICE(h);
    if (!mhz || type > 3) return ERR_INVALID_ARGUMENT;
    *mhz = clock_of(type, sc.sm_clock);
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMaxClockInfo(void* h, unsigned type, unsigned* mhz) {
    DEVICE(h);
    if (!mhz || type > 3) return ERR_INVALID_ARGUMENT;
    *mhz = clock_of(type, -1);
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetTemperature(void* h, unsigned sensor, unsigned* c) {
    DEVICE(h);
    if (!c || sensor != 0) return ERR_INVALID_ARGUMENT;
    *c = sc.temp >= 0 ? (unsigned)sc.temp : (unsigned)(30.0 + 0.5 * d->util + 0.5);
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPcieThroughput(void* h, unsigned counter, unsigned* kbps) {
    DEVICE(h);
    if (!kbps || counter > 1) return ERR_INVALID_ARGUMENT;
    *kbps = (unsigned)(counter == 0 ? d->tx_kbps : d->rx_kbps);
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(void* h, unsigned long long* r) {
    DEVICE(h);
    if (!r) return ERR_INVALID_ARGUMENT;
    *r = sc.throttle | (d->util < 0.5 ? REASON_IDLE : 0) | (d->capped ? REASON_SW_POWER_CAP : 0);
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void* h, unsigned long long* r) {
    return nvmlDeviceGetCurrentClocksThrottleReasons(h, r);
}

struct ProcessInfo {  // nvmlProcessInfo_v2_t, which the _v3 call fills
    unsigned pid;
    unsigned long long used;
    unsigned gpu_instance, compute_instance;
};
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void* h, unsigned* count, ProcessInfo* out) {
    DEVICE(h);
    if (!count) return ERR_INVALID_ARGUMENT;
    unsigned n = (unsigned)d->procs.size();
    if (!out || *count < n) {
        *count = n;
        return n ? ERR_INSUFFICIENT_SIZE : SUCCESS;
    }
    for (unsigned i = 0; i < n; ++i)
        out[i] = {d->procs[i].pid, d->procs[i].bytes, 0xFFFFFFFFu, 0xFFFFFFFFu};
    *count = n;
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(void* h, unsigned* count, ProcessInfo*) {
    DEVICE(h);
    if (!count) return ERR_INVALID_ARGUMENT;
    *count = 0;
    return SUCCESS;
}

struct ProcUtil {  // nvmlProcessUtilizationSample_t
    unsigned pid;
    unsigned long long ts;
    unsigned sm, mem, enc, dec;
};
// The last window's per-process samples newer than `since` (µs); NOT_FOUND when none.
API nvmlReturn_t nvmlDeviceGetProcessUtilization(void* h, ProcUtil* out, unsigned* count,
                                                 unsigned long long since) {
    DEVICE(h);
    if (!count) return ERR_INVALID_ARGUMENT;
    unsigned n = d->sample_ts > since ? (unsigned)d->procs.size() : 0;
    if (n == 0) return ERR_NOT_FOUND;
    if (!out || *count < n) {
        *count = n;
        return ERR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; ++i)
        out[i] = {d->procs[i].pid, d->sample_ts, d->procs[i].sm, d->procs[i].mem, 0, 0};
    *count = n;
    return SUCCESS;
}

// ---- ECC counters and XID events ------------------------------------------------------------

enum { ERR_TIMEOUT = 10, EVENT_XID_CRITICAL = 0x8 };

API nvmlReturn_t nvmlDeviceGetTotalEccErrors(void* h, unsigned error_type, unsigned counter,
                                             unsigned long long* count) {
    DEVICE(h);
    if (!count || error_type > 1 || counter > 1) return ERR_INVALID_ARGUMENT;
    // Volatile and aggregate alike: nothing was counted before this process read it.
    *count = (unsigned long long)(error_type == 0 ? d->ecc_c : d->ecc_u);
    return SUCCESS;
}

struct EventSet {
    std::vector<Dev*> xid;  // devices registered for critical XID events
};
struct EventData {
    void* device;
    unsigned long long type, data;
    unsigned gpu_instance, compute_instance;
};

API nvmlReturn_t nvmlEventSetCreate(EventSet** set) {
    if (!set) return ERR_INVALID_ARGUMENT;
    *set = new EventSet;
    return SUCCESS;
}
API nvmlReturn_t nvmlEventSetFree(EventSet* set) {
    delete set;
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(void* h, unsigned long long* types) {
    if (!dev_of(h) || !types) return ERR_INVALID_ARGUMENT;
    *types = EVENT_XID_CRITICAL;
    return SUCCESS;
}
API nvmlReturn_t nvmlDeviceRegisterEvents(void* h, unsigned long long types, EventSet* set) {
    Dev* d = dev_of(h);
    if (!d || !set) return ERR_INVALID_ARGUMENT;
    if (types & ~(unsigned long long)EVENT_XID_CRITICAL) return ERR_NOT_SUPPORTED;
    set->xid.push_back(d);
    return SUCCESS;
}
// One scripted XID per device per read after the device did work since the last one;
// otherwise a timeout at once (the stand-in never blocks: tune reads with timeout 0).
API nvmlReturn_t nvmlEventSetWait_v2(EventSet* set, EventData* data, unsigned) {
    if (!set || !data) return ERR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> l(g_mu);
    for (Dev* d : set->xid) {
        refresh(*d);
        const Script& s = g_script[(size_t)d->index];
        if (s.xid < 0 || d->busy_total_ns == d->xid_mark_ns) continue;
        d->xid_mark_ns = d->busy_total_ns;
        *data = EventData{d, EVENT_XID_CRITICAL, (unsigned long long)s.xid, 0xffffffffu, 0xffffffffu};
        return SUCCESS;
    }
    return ERR_TIMEOUT;
}
API nvmlReturn_t nvmlEventSetWait(EventSet* set, EventData* data, unsigned ms) {
    return nvmlEventSetWait_v2(set, data, ms);
}
