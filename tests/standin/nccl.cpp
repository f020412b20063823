// A CPU stand-in for libnccl.so.2 (NCCL 2.27's C API as cudarc 0.19 declares it), for tests
// only, next to the driver stand-in (cuda.cpp). The ranks of a communicator are threads of
// one process, one per stand-in device, or of several processes of one machine; buffers
// are the driver stand-in's host memory.
//   - Across processes, as real NCCL bootstraps: ncclGetUniqueId starts (once per process)
//     a listener on 127.0.0.1 and writes its port into the id. A rank whose id comes from
//     another process connects there; a thread of that process joins the communicator on
//     its behalf and, for each of its collectives, takes its description and send bytes
//     over the socket, runs the same round as a local rank would (the same checks, the
//     same reduction in rank order) and sends the result back. The remote rank checks its
//     own buffers. A remote rank that leaves (destroy, abort, or its process dying) breaks
//     the communicator as a local one does; a dead listener is an init error.
//   - Every collective is queued on the caller's stream (tune_standin_enqueue), so it runs
//     in stream order after earlier work and before later work, on the stream's thread.
//     There it waits for the same collective (same sequence number) from every rank, checks
//     that kind, count, type, op and root agree (else nothing is written and the
//     communicator's async error is ncclInvalidUsage), checks every buffer against live
//     allocations, sleeps TUNE_NCCL_STANDIN_LAG_US (default 1000) before reading, reduces in
//     rank order 0, 1, 2, ... into a private buffer (so every rank gets the same bits and
//     in-place calls work), waits until every rank has read, then writes.
//   - Every wait ends: a peer's abort or destroy wakes it with an error, and after
//     TUNE_NCCL_STANDIN_TIMEOUT_S (default 60) a missing rank is an error, not a hang.
// It measures nothing: no bandwidth, no overlap of communication with compute, no NVLink.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#define API extern "C" __attribute__((visibility("default")))

typedef int ncclResult_t;
enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
};
// ncclDataType_t and ncclRedOp_t as in nccl.h (2.19 and later: bfloat16 is 9).
enum { T_I8, T_U8, T_I32, T_U32, T_I64, T_U64, T_F16, T_F32, T_F64, T_BF16 };
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG };
enum Kind { ALL_REDUCE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER };
static const char* const KIND_NAME[] = {"ncclAllReduce", "ncclBroadcast", "ncclReduce",
                                        "ncclAllGather", "ncclReduceScatter"};
static const char* const TYPE_NAME[] = {"int8",   "uint8",   "int32",   "uint32", "int64",
                                        "uint64", "float16", "float32", "float64", "bfloat16"};
static const char* const OP_NAME[] = {"sum", "prod", "max", "min", "avg"};

struct ncclUniqueId {
    char internal[128];
};

static const int VERSION = 22700;  // what ncclGetVersion reports: NCCL 2.27.0's encoding

// ---- messages -------------------------------------------------------------------------

static std::mutex* g_msg_mu = new std::mutex;  // never destroyed: threads may outlive exit
static std::string* g_last = new std::string;

static void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> g(*g_msg_mu);
    fprintf(stderr, "stand-in NCCL: %s\n", buf);
    *g_last = buf;
}

static long env_long(const char* name, long dflt) {
    const char* v = getenv(name);
    if (!v || !*v) return dflt;
    char* end = nullptr;
    long x = strtol(v, &end, 10);
    return (*end == '\0' && x >= 0) ? x : dflt;
}
static long timeout_s() {
    static long t = env_long("TUNE_NCCL_STANDIN_TIMEOUT_S", 60);
    return t;
}
static long lag_us() {
    static long t = env_long("TUNE_NCCL_STANDIN_LAG_US", 1000);
    return t;
}

// ---- the driver stand-in, found at run time ---------------------------------------------

// Resolved from the libcuda.so.1 already loaded (the caller uses the driver before NCCL), or
// else from the one next to this library; nothing here needs it before a communicator,
// so ncclGetVersion works on a machine with no driver at all.
struct Driver {
    int (*enqueue)(void*, const char*, void (*)(void*), void*);
    int (*check_range)(const void*, size_t, const char*);
    int (*current_device)(void);
    int (*stream_device)(void*);
    int (*device_count)(int*);
};

static const Driver* driver() {
    static const Driver* d = []() -> const Driver* {
        void* h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW);
        if (!h) {
            Dl_info info;
            char real[PATH_MAX];
            if (dladdr((void*)&driver, &info) && info.dli_fname &&
                realpath(info.dli_fname, real)) {
                std::string p(real);
                p = p.substr(0, p.rfind('/') + 1) + "libcuda.so.1";
                h = dlopen(p.c_str(), RTLD_NOW);
            }
        }
        if (!h) {
            say("no libcuda.so.1 is loaded and none lies next to this library");
            return nullptr;
        }
        auto* r = new Driver{
            (int (*)(void*, const char*, void (*)(void*), void*))dlsym(h, "tune_standin_enqueue"),
            (int (*)(const void*, size_t, const char*))dlsym(h, "tune_standin_check_range"),
            (int (*)(void))dlsym(h, "tune_standin_current_device"),
            (int (*)(void*))dlsym(h, "tune_standin_stream_device"),
            (int (*)(int*))dlsym(h, "cuDeviceGetCount"),
        };
        if (!r->enqueue || !r->check_range || !r->current_device || !r->stream_device ||
            !r->device_count) {
            say("the libcuda.so.1 loaded here is not tune's CPU stand-in (no tune_standin_* "
                "symbols); this NCCL stand-in runs only on it");
            return nullptr;
        }
        return r;
    }();
    return d;
}

static int device_count() {
    int n = 0;
    const Driver* d = driver();
    if (!d || d->device_count(&n) != 0) return 0;
    return n;
}

// ---- unique ids -----------------------------------------------------------------------------

static const char MAGIC[8] = {'t', 'u', 'n', 'e', 'N', 'C', 'C', 'L'};
struct IdBody {
    char magic[8];
    uint32_t pid;
    uint16_t port;  // the bootstrap listener of process `pid` on 127.0.0.1
    uint16_t zero;
    uint64_t counter;
    uint64_t nonce;
};
static uint16_t hub_port();
static_assert(sizeof(IdBody) <= sizeof(ncclUniqueId), "id layout");

API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (!id) return ncclInvalidArgument;
    static std::atomic<uint64_t> counter{0};
    IdBody b{};
    memcpy(b.magic, MAGIC, 8);
    b.pid = (uint32_t)getpid();
    b.port = hub_port();
    b.counter = ++counter;
    std::random_device rd;
    b.nonce = ((uint64_t)rd() << 32) ^ rd() ^
              (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &b, sizeof b);
    return ncclSuccess;
}

// ---- communicators --------------------------------------------------------------------------

struct Desc {
    int kind = -1;
    size_t count = 0;
    int type = 0, op = 0, root = 0;
    const void* send = nullptr;
    void* recv = nullptr;
};

// One collective, as every rank's stream thread meets it.
struct Round {
    int arrived = 0, read = 0, left = 0;
    std::vector<Desc> desc;
    std::vector<char> bad_buffer;
    int verdict = ncclSuccess;  // set by the last rank to arrive
};

// What the ranks of one communicator share.
struct Clique {
    explicit Clique(int n)
        : nranks(n), device(n, -1), async_err(n, ncclSuccess), issued(n, 0), completed(n, 0) {}
    const int nranks;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> device;  // per rank, -1 until it joined
    int joined = 0;
    bool complete = false;
    int init_error = ncclSuccess;  // a failed init: every rank waiting in it returns this
    int broken = ncclSuccess;      // abort, destroy, timeout or mismatch: waits fail at once
    std::vector<int> async_err;
    std::vector<uint64_t> issued, completed;  // collectives per rank
    std::map<uint64_t, Round> rounds;
};

// A rank of a communicator whose other ranks live in another process (through its
// listener): its socket, and its own bookkeeping of queued collectives.
struct Remote {
    Remote(int f, int n) : fd(f), nranks(n) {}
    ~Remote() { close(fd); }
    const int fd, nranks;
    std::mutex mu;
    std::condition_variable cv;
    uint64_t issued = 0, completed = 0;
    int async_err = ncclSuccess;
};

// ncclComm_t: one rank's handle.
struct Comm {
    std::shared_ptr<Clique> clique;  // or, for a rank joined through another process:
    std::shared_ptr<Remote> remote;
    int nranks = 0;
    int rank = 0, device = 0;
    bool ready = false;  // false while a grouped init is pending, or after it failed
    int init_result = ncclInProgress;
};

static std::mutex* g_live_mu = new std::mutex;
static std::set<Comm*>* g_live = new std::set<Comm*>;
static std::mutex* g_reg_mu = new std::mutex;
// Communicators still gathering their ranks, by the id's (counter, nonce).
static auto* g_pending = new std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<Clique>>;

static Comm* live(void* h) {
    std::lock_guard<std::mutex> g(*g_live_mu);
    return g_live->count((Comm*)h) ? (Comm*)h : nullptr;
}
static void forget(Comm* c) {
    std::lock_guard<std::mutex> g(*g_live_mu);
    g_live->erase(c);
}
static Comm* new_comm() {
    Comm* c = new Comm;
    std::lock_guard<std::mutex> g(*g_live_mu);
    g_live->insert(c);
    return c;
}

static std::chrono::steady_clock::time_point deadline() {
    return std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s());
}

static ncclResult_t remote_init(Comm* c, int nranks, const IdBody& b, int rank, int dev);

// Joins the communicator `key` of this process as `rank` and waits for all its ranks.
static ncclResult_t join_clique(Comm* c, int nranks, std::pair<uint64_t, uint64_t> key, int rank,
                                int dev) {
    std::shared_ptr<Clique> q;
    {
        std::lock_guard<std::mutex> g(*g_reg_mu);
        auto it = g_pending->find(key);
        if (it == g_pending->end()) it = g_pending->emplace(key, std::make_shared<Clique>(nranks)).first;
        q = it->second;
    }
    auto drop_pending = [&] {
        std::lock_guard<std::mutex> g(*g_reg_mu);
        auto it = g_pending->find(key);
        if (it != g_pending->end() && it->second == q) g_pending->erase(it);
    };
    std::unique_lock<std::mutex> l(q->mu);
    auto fail = [&](int e) {
        if (!q->init_error) q->init_error = e;
        q->cv.notify_all();
        l.unlock();
        drop_pending();
        return e;
    };
    if (q->nranks != nranks) {
        say("ncclCommInitRank: rank %d says %d ranks, another rank of this id said %d", rank,
            nranks, q->nranks);
        return fail(ncclInvalidUsage);
    }
    if (q->init_error) return fail(q->init_error);
    if (q->device[rank] != -1) {
        say("ncclCommInitRank: rank %d joined this id twice", rank);
        return fail(ncclInvalidUsage);
    }
    for (int r = 0; r < nranks; ++r) {
        if (q->device[r] == dev) {
            say("Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", rank, r,
                dev);
            return fail(ncclInvalidUsage);
        }
    }
    q->device[rank] = dev;
    if (++q->joined == nranks) {
        q->complete = true;
        q->cv.notify_all();
    }
    if (!q->cv.wait_until(l, deadline(), [&] { return q->complete || q->init_error; })) {
        say("ncclCommInitRank: rank %d waited %lds (TUNE_NCCL_STANDIN_TIMEOUT_S) but only %d "
            "of %d ranks joined",
            rank, timeout_s(), q->joined, nranks);
        return fail(ncclSystemError);
    }
    if (q->init_error) return fail(q->init_error);
    l.unlock();
    drop_pending();
    c->clique = q;
    c->nranks = nranks;
    c->rank = rank;
    c->device = dev;
    c->ready = true;
    c->init_result = ncclSuccess;
    return ncclSuccess;
}

// ncclCommInitRank's work: join the id's communicator, here or through the process that
// made the id.
static ncclResult_t do_init(Comm* c, int nranks, const ncclUniqueId& id, int rank, int dev) {
    IdBody b;
    memcpy(&b, id.internal, sizeof b);
    if (memcmp(b.magic, MAGIC, 8) != 0) {
        say("ncclCommInitRank: the id did not come from this stand-in's ncclGetUniqueId");
        return ncclInvalidArgument;
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        say("ncclCommInitRank: rank %d of %d ranks is out of range", rank, nranks);
        return ncclInvalidArgument;
    }
    if (b.pid != (uint32_t)getpid()) return remote_init(c, nranks, b, rank, dev);
    return join_clique(c, nranks, std::make_pair(b.counter, b.nonce), rank, dev);
}

// ---- groups ----------------------------------------------------------------------------------

struct Deferred {
    Comm* comm;
    int nranks;
    ncclUniqueId id;
    int rank, device;
};
static thread_local int t_depth = 0;
static thread_local std::vector<Deferred> t_deferred;

API ncclResult_t ncclGroupStart() {
    ++t_depth;
    return ncclSuccess;
}

// The outermost end runs the group's deferred inits, each on its own thread, since each
// waits for all its communicator's ranks (often all in this same group).
API ncclResult_t ncclGroupEnd() {
    if (t_depth == 0) {
        say("ncclGroupEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--t_depth > 0) return ncclSuccess;
    std::vector<Deferred> work;
    work.swap(t_deferred);
    std::vector<int> results(work.size(), ncclSuccess);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < work.size(); ++i) {
        threads.emplace_back([&work, &results, i] {
            Deferred& d = work[i];
            results[i] = do_init(d.comm, d.nranks, d.id, d.rank, d.device);
            d.comm->init_result = results[i];
        });
    }
    for (auto& t : threads) t.join();
    for (int r : results)
        if (r != ncclSuccess) return r;
    return ncclSuccess;
}

// ---- initialisation and teardown -------------------------------------------------------

API ncclResult_t ncclGetVersion(int* v) {
    if (!v) return ncclInvalidArgument;
    *v = VERSION;
    return ncclSuccess;
}

API ncclResult_t ncclCommInitRank(void** out, int nranks, ncclUniqueId id, int rank) {
    if (!out) return ncclInvalidArgument;
    const Driver* d = driver();
    if (!d) return ncclSystemError;
    // As the CUDA runtime does: no current context means device 0.
    int dev = d->current_device();
    if (dev < 0) dev = 0;
    Comm* c = new_comm();
    if (t_depth > 0) {
        t_deferred.push_back(Deferred{c, nranks, id, rank, dev});
        *out = c;
        return ncclSuccess;
    }
    ncclResult_t r = do_init(c, nranks, id, rank, dev);
    if (r != ncclSuccess) {
        forget(c);
        delete c;
        *out = nullptr;
        return r;
    }
    *out = c;
    return ncclSuccess;
}

API ncclResult_t ncclCommInitAll(void** comms, int ndev, const int* devlist) {
    if (!comms || ndev < 1) return ncclInvalidArgument;
    if (!driver()) return ncclSystemError;
    int count = device_count();
    auto q = std::make_shared<Clique>(ndev);
    for (int r = 0; r < ndev; ++r) {
        int dev = devlist ? devlist[r] : r;
        if (dev < 0 || dev >= count) {
            say("ncclCommInitAll: device %d does not exist (%d devices)", dev, count);
            return ncclInvalidArgument;
        }
        for (int s = 0; s < r; ++s) {
            if (q->device[s] == dev) {
                say("Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", r, s,
                    dev);
                return ncclInvalidUsage;
            }
        }
        q->device[r] = dev;
    }
    q->joined = ndev;
    q->complete = true;
    for (int r = 0; r < ndev; ++r) {
        Comm* c = new_comm();
        c->clique = q;
        c->nranks = ndev;
        c->rank = r;
        c->device = q->device[r];
        c->ready = true;
        c->init_result = ncclSuccess;
        comms[r] = c;
    }
    return ncclSuccess;
}

// Waits until this rank's queued collectives have run (or the clique broke, or timed out).
static void flush(Comm* c) {
    if (c->remote) {
        Remote& rm = *c->remote;
        std::unique_lock<std::mutex> l(rm.mu);
        if (!rm.cv.wait_until(l, deadline(), [&] { return rm.completed >= rm.issued; }))
            say("rank %d: %llu collectives still queued after %lds; leaving them", c->rank,
                (unsigned long long)(rm.issued - rm.completed), timeout_s());
        return;
    }
    Clique& q = *c->clique;
    std::unique_lock<std::mutex> l(q.mu);
    int r = c->rank;
    if (!q.cv.wait_until(l, deadline(), [&] { return q.completed[r] >= q.issued[r]; }))
        say("rank %d: %llu collectives still queued after %lds; leaving them", r,
            (unsigned long long)(q.issued[r] - q.completed[r]), timeout_s());
}

// Peers waiting for this rank in a collective wake with ncclRemoteError.
static void leave(Comm* c, const char* how) {
    forget(c);
    // A remote rank hangs up: its stream thread, if blocked on the socket, wakes with an
    // error, and the process holding its peers breaks their communicator.
    if (c->remote) shutdown(c->remote->fd, SHUT_RDWR);
    if (c->clique) {
        Clique& q = *c->clique;
        std::lock_guard<std::mutex> g(q.mu);
        if (!q.broken) q.broken = ncclRemoteError;
        q.cv.notify_all();
        (void)how;
    }
    delete c;
}

API ncclResult_t ncclCommFinalize(void* h) {
    Comm* c = live(h);
    if (!c) return ncclInvalidArgument;
    if (c->ready) flush(c);
    return ncclSuccess;
}
API ncclResult_t ncclCommDestroy(void* h) {
    if (!h) return ncclSuccess;
    Comm* c = live(h);
    if (!c) return ncclInvalidArgument;
    if (c->ready) flush(c);
    leave(c, "destroyed");
    return ncclSuccess;
}
API ncclResult_t ncclCommAbort(void* h) {
    if (!h) return ncclSuccess;
    Comm* c = live(h);
    if (!c) return ncclInvalidArgument;
    leave(c, "aborted");
    return ncclSuccess;
}

API ncclResult_t ncclCommCount(const void* h, int* n) {
    Comm* c = live((void*)h);
    if (!c || !n) return ncclInvalidArgument;
    if (!c->ready) return ncclInvalidUsage;
    *n = c->nranks;
    return ncclSuccess;
}
API ncclResult_t ncclCommCuDevice(const void* h, int* dev) {
    Comm* c = live((void*)h);
    if (!c || !dev) return ncclInvalidArgument;
    if (!c->ready) return ncclInvalidUsage;
    *dev = c->device;
    return ncclSuccess;
}
API ncclResult_t ncclCommUserRank(const void* h, int* rank) {
    Comm* c = live((void*)h);
    if (!c || !rank) return ncclInvalidArgument;
    if (!c->ready) return ncclInvalidUsage;
    *rank = c->rank;
    return ncclSuccess;
}
API ncclResult_t ncclCommGetAsyncError(void* h, int* err) {
    Comm* c = live(h);
    if (!c || !err) return ncclInvalidArgument;
    if (!c->ready) {
        *err = c->init_result;
        return ncclSuccess;
    }
    if (c->remote) {
        std::lock_guard<std::mutex> g(c->remote->mu);
        *err = c->remote->async_err;
        return ncclSuccess;
    }
    std::lock_guard<std::mutex> g(c->clique->mu);
    *err = c->clique->async_err[c->rank];
    return ncclSuccess;
}

API const char* ncclGetErrorString(int r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error (stand-in NCCL: see its stderr)";
        case ncclSystemError: return "unhandled system error (stand-in NCCL: see its stderr)";
        case ncclInternalError: return "internal error (stand-in NCCL)";
        case ncclInvalidArgument: return "invalid argument (stand-in NCCL: see its stderr)";
        case ncclInvalidUsage: return "invalid usage (stand-in NCCL: see its stderr)";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}
API const char* ncclGetLastError(void*) {
    static thread_local std::string copy;
    std::lock_guard<std::mutex> g(*g_msg_mu);
    copy = *g_last;
    return copy.c_str();
}

#include "nccl_reduce.h"

// ---- collectives -----------------------------------------------------------------------

struct Op {
    std::shared_ptr<Clique> clique;
    int rank;
    uint64_t seq;
    Desc desc;
};

// Rank `me`'s part of collective `seq` (`bad`: its buffers failed their check): waits
// for every rank, checks they agree, computes and writes its output. Returns its error,
// also kept as its async error.
static int run_round(Clique& q, int me, uint64_t seq, const Desc& desc, bool bad) {
    const int n = q.nranks;
    std::unique_lock<std::mutex> l(q.mu);
    auto finish = [&](int err) {
        if (err && !q.async_err[me]) q.async_err[me] = err;
        ++q.completed[me];
        q.cv.notify_all();
        return err;
    };
    if (q.broken) return finish(q.broken);
    Round& rd = q.rounds[seq];
    if (rd.desc.empty()) {
        rd.desc.resize(n);
        rd.bad_buffer.assign(n, 0);
    }
    rd.desc[me] = desc;
    rd.bad_buffer[me] = bad;
    if (++rd.arrived == n) {
        for (int r = 0; r < n; ++r) {
            const Desc &a = rd.desc[0], &b = rd.desc[r];
            bool same = a.kind == b.kind && a.count == b.count && a.type == b.type &&
                        (!has_op(a.kind) || a.op == b.op) && (!has_root(a.kind) || a.root == b.root);
            if (!same) {
                say("collective #%llu does not match across ranks: rank 0 called %s, rank %d "
                    "%s; nothing written",
                    (unsigned long long)seq, describe(a).c_str(), r, describe(b).c_str());
                rd.verdict = ncclInvalidUsage;
                break;
            }
            if (rd.bad_buffer[r]) rd.verdict = ncclUnhandledCudaError;
        }
        q.cv.notify_all();
    }
    bool all = q.cv.wait_until(l, deadline(), [&] { return rd.arrived == n || q.broken; });
    if (rd.arrived < n) {
        // A peer aborted, or never came: withdraw, so no rank proceeds with this round.
        --rd.arrived;
        if (!all) {
            say("rank %d waited %lds (TUNE_NCCL_STANDIN_TIMEOUT_S) in collective #%llu %s for "
                "the other ranks",
                me, timeout_s(), (unsigned long long)seq, describe(desc).c_str());
            if (!q.broken) q.broken = ncclSystemError;
        }
        return finish(q.broken);
    }
    auto depart = [&](int err) {
        if (++rd.left == n) q.rounds.erase(seq);
        return finish(err);
    };
    if (rd.verdict) {
        if (!q.broken) q.broken = rd.verdict;
        return depart(rd.verdict);
    }
    l.unlock();
    long lag = lag_us();  // a caller that did not order this after its producer reads early
    if (lag > 0) std::this_thread::sleep_for(std::chrono::microseconds(lag));
    std::vector<char> out = compute(rd, me, n);
    l.lock();
    ++rd.read;
    q.cv.notify_all();
    // Every rank is past arrival and only reads now, so this wait is short.
    q.cv.wait(l, [&] { return rd.read == n; });
    l.unlock();
    if (!out.empty()) memcpy(desc.recv, out.data(), out.size());
    l.lock();
    return depart(ncclSuccess);
}

// Runs on the stream's thread when the stream reaches the collective.
static void run_op(void* arg) {
    std::unique_ptr<Op> o((Op*)arg);
    const Driver* drv = driver();
    size_t sb = 0, rb = 0;
    extents(o->desc, o->rank, o->clique->nranks, &sb, &rb);
    const char* what = KIND_NAME[o->desc.kind];
    bool bad = !drv->check_range(o->desc.send, sb, what) || !drv->check_range(o->desc.recv, rb, what);
    run_round(*o->clique, o->rank, o->seq, o->desc, bad);
}


#include "nccl_remote.h"

static ncclResult_t collective(int kind, const void* send, void* recv, size_t count, int type,
                               int op, int root, void* h, void* stream) {
    Comm* c = live(h);
    if (!c) {
        say("%s: not a live communicator", KIND_NAME[kind]);
        return ncclInvalidArgument;
    }
    if (!c->ready) {
        say("%s: the communicator's init has not finished (call ncclGroupEnd) or failed",
            KIND_NAME[kind]);
        return ncclInvalidUsage;
    }
    if (type < 0 || type > T_BF16) {
        say("%s: data type %d is not supported by the stand-in", KIND_NAME[kind], type);
        return ncclInvalidArgument;
    }
    if (has_op(kind) && (op < 0 || op > OP_AVG)) {
        say("%s: reduction op %d is not supported by the stand-in", KIND_NAME[kind], op);
        return ncclInvalidArgument;
    }
    if (has_root(kind) && (root < 0 || root >= c->nranks)) {
        say("%s: root %d is not a rank of %d", KIND_NAME[kind], root, c->nranks);
        return ncclInvalidArgument;
    }
    const Driver* drv = driver();
    int sdev = drv->stream_device(stream);
    if (sdev >= 0 && sdev != c->device) {
        say("%s: rank %d is on device %d but the stream belongs to device %d", KIND_NAME[kind],
            c->rank, c->device, sdev);
        return ncclInvalidUsage;
    }
    if (c->remote) {
        Remote& rm = *c->remote;
        auto* o = new RemoteOp{c->remote, c->rank, 0, Desc{kind, count, type, op, root, send, recv}};
        {
            std::lock_guard<std::mutex> g(rm.mu);
            if (rm.async_err) {
                int e = rm.async_err;
                delete o;
                return e;
            }
            o->seq = rm.issued++;
        }
        if (drv->enqueue(stream, KIND_NAME[kind], run_remote, o) != 0) {
            std::lock_guard<std::mutex> g(rm.mu);
            ++rm.completed;
            delete o;
            return ncclUnhandledCudaError;
        }
        return ncclSuccess;
    }
    Clique& q = *c->clique;
    auto* o = new Op{c->clique, c->rank, 0, Desc{kind, count, type, op, root, send, recv}};
    {
        std::lock_guard<std::mutex> g(q.mu);
        if (q.async_err[c->rank]) {
            int e = q.async_err[c->rank];
            delete o;
            return e;
        }
        o->seq = q.issued[c->rank]++;
    }
    if (drv->enqueue(stream, KIND_NAME[kind], run_op, o) != 0) {
        std::lock_guard<std::mutex> g(q.mu);
        ++q.completed[c->rank];
        delete o;
        return ncclUnhandledCudaError;
    }
    return ncclSuccess;
}

API ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, int type, int op,
                               void* comm, void* stream) {
    return collective(ALL_REDUCE, send, recv, count, type, op, 0, comm, stream);
}
API ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, int type, int root,
                               void* comm, void* stream) {
    return collective(BROADCAST, send, recv, count, type, 0, root, comm, stream);
}
API ncclResult_t ncclBcast(void* buff, size_t count, int type, int root, void* comm,
                           void* stream) {
    return collective(BROADCAST, buff, buff, count, type, 0, root, comm, stream);
}
API ncclResult_t ncclReduce(const void* send, void* recv, size_t count, int type, int op,
                            int root, void* comm, void* stream) {
    return collective(REDUCE, send, recv, count, type, op, root, comm, stream);
}
API ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, int type,
                               void* comm, void* stream) {
    return collective(ALL_GATHER, send, recv, sendcount, type, 0, 0, comm, stream);
}
API ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, int type,
                                   int op, void* comm, void* stream) {
    return collective(REDUCE_SCATTER, send, recv, recvcount, type, op, 0, comm, stream);
}
