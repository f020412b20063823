// The NCCL stand-in's ranks in other processes (included by nccl.cpp, after the
// collectives' rounds): the bootstrap listener, the wire format and both ends of a remote
// rank. See nccl.cpp's header comment.

static bool send_all(int fd, const void* p, size_t n) {
    const char* c = (const char*)p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}
static bool recv_all(int fd, void* p, size_t n) {
    char* c = (char*)p;
    while (n > 0) {
        ssize_t r = recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

struct Hello {
    char magic[8];
    uint64_t counter, nonce;
    int32_t nranks, rank, dev;
};
struct Req {
    uint64_t seq, count, sbytes, rbytes;
    int32_t kind, type, op, root, bad, pad;
};
struct Rep {
    int32_t err, pad;
    uint64_t rbytes;
};

// The listener's side of one remote rank: joins the communicator for it, then runs each
// of its collectives as a local rank's round.
static void serve(int fd) {
    Hello h{};
    if (!recv_all(fd, &h, sizeof h) || memcmp(h.magic, MAGIC, 8) != 0) {
        close(fd);
        return;
    }
    Comm proxy;
    int32_t r = ncclInvalidArgument;
    if (h.nranks >= 1 && h.rank >= 0 && h.rank < h.nranks)
        r = join_clique(&proxy, h.nranks, std::make_pair(h.counter, h.nonce), h.rank, h.dev);
    if (!send_all(fd, &r, sizeof r) || r != ncclSuccess) {
        close(fd);
        return;
    }
    Clique& q = *proxy.clique;
    std::vector<char> sbuf, rbuf;
    for (;;) {
        Req rq{};
        if (!recv_all(fd, &rq, sizeof rq)) break;
        if (rq.kind < 0 || rq.kind > REDUCE_SCATTER || rq.type < 0 || rq.type > T_BF16) break;
        sbuf.assign(rq.sbytes, 0);
        rbuf.assign(rq.rbytes, 0);
        if (rq.sbytes && !recv_all(fd, sbuf.data(), rq.sbytes)) break;
        Desc d{rq.kind, rq.count, rq.type, rq.op, rq.root, rq.sbytes ? sbuf.data() : nullptr,
               rq.rbytes ? rbuf.data() : nullptr};
        {
            std::lock_guard<std::mutex> g(q.mu);
            ++q.issued[h.rank];
        }
        Rep rp{run_round(q, h.rank, rq.seq, d, rq.bad != 0), 0, 0};
        if (rp.err == ncclSuccess) rp.rbytes = rq.rbytes;
        if (!send_all(fd, &rp, sizeof rp) ||
            (rp.rbytes && !send_all(fd, rbuf.data(), rp.rbytes)))
            break;
    }
    // The remote rank hung up (destroy, abort, or its process died): as `leave` does for
    // a local rank, its peers' waits end with an error.
    {
        std::lock_guard<std::mutex> g(q.mu);
        if (!q.broken) q.broken = ncclRemoteError;
        q.cv.notify_all();
    }
    close(fd);
}

static std::mutex* g_hub_mu = new std::mutex;
static pid_t g_hub_pid = 0;  // the process the listener belongs to (not a forked child)
static uint16_t g_hub_port = 0;

// This process's bootstrap listener on 127.0.0.1 (started on first use); 0 if it could not
// listen, in which case ids of this process work only within it.
static uint16_t hub_port() {
    std::lock_guard<std::mutex> g(*g_hub_mu);
    if (g_hub_pid == getpid()) return g_hub_port;
    g_hub_pid = getpid();
    g_hub_port = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (sockaddr*)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (sockaddr*)&a, &len) != 0) {
        say("cannot open the bootstrap listener: %s; communicators stay within this process",
            strerror(errno));
        if (fd >= 0) close(fd);
        return 0;
    }
    g_hub_port = ntohs(a.sin_port);
    std::thread([fd] {
        for (;;) {
            int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                continue;
            }
            int one = 1;
            setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            std::thread(serve, c).detach();
        }
    }).detach();
    return g_hub_port;
}

static ncclResult_t remote_init(Comm* c, int nranks, const IdBody& b, int rank, int dev) {
    if (b.port == 0) {
        say("ncclCommInitRank: the id comes from pid %u, which had no bootstrap listener", b.pid);
        return ncclSystemError;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(b.port);
    if (fd < 0 || connect(fd, (sockaddr*)&a, sizeof a) != 0) {
        say("ncclCommInitRank: rank %d cannot reach the bootstrap listener of pid %u at "
            "127.0.0.1:%u (%s); did that process exit?",
            rank, b.pid, (unsigned)b.port, strerror(errno));
        if (fd >= 0) close(fd);
        return ncclSystemError;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // A collective may wait TUNE_NCCL_STANDIN_TIMEOUT_S for the other ranks over there.
    timeval tv{timeout_s() + 5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    Hello h{};
    memcpy(h.magic, MAGIC, 8);
    h.counter = b.counter;
    h.nonce = b.nonce;
    h.nranks = nranks;
    h.rank = rank;
    h.dev = dev;
    int32_t r = ncclSystemError;
    if (!send_all(fd, &h, sizeof h) || !recv_all(fd, &r, sizeof r)) {
        say("ncclCommInitRank: rank %d lost the bootstrap listener of pid %u while joining",
            rank, b.pid);
        r = ncclSystemError;
    } else if (r != ncclSuccess) {
        say("ncclCommInitRank: rank %d could not join through pid %u (%s; its stderr says why)",
            rank, b.pid, ncclGetErrorString(r));
    }
    if (r != ncclSuccess) {
        close(fd);
        return r;
    }
    c->remote = std::make_shared<Remote>(fd, nranks);
    c->nranks = nranks;
    c->rank = rank;
    c->device = dev;
    c->ready = true;
    c->init_result = ncclSuccess;
    return ncclSuccess;
}

struct RemoteOp {
    std::shared_ptr<Remote> rm;
    int rank;
    uint64_t seq;
    Desc desc;
};

// A remote rank's collective, on its stream's thread: checks its buffers, sends its
// part, writes what comes back.
static void run_remote(void* arg) {
    std::unique_ptr<RemoteOp> o((RemoteOp*)arg);
    Remote& rm = *o->rm;
    const Desc& d = o->desc;
    size_t sb = 0, rb = 0;
    extents(d, o->rank, rm.nranks, &sb, &rb);
    const char* what = KIND_NAME[d.kind];
    const Driver* drv = driver();
    bool bad = !drv->check_range(d.send, sb, what) || !drv->check_range(d.recv, rb, what);
    int err = ncclSuccess;
    {
        std::lock_guard<std::mutex> g(rm.mu);
        err = rm.async_err;
    }
    if (!err) {
        Req rq{o->seq, d.count, bad ? 0 : sb, rb, d.kind, d.type, d.op, d.root, bad, 0};
        Rep rp{};
        bool ok = send_all(rm.fd, &rq, sizeof rq) &&
                  (rq.sbytes == 0 || send_all(rm.fd, d.send, rq.sbytes)) &&
                  recv_all(rm.fd, &rp, sizeof rp);
        if (ok && rp.err == ncclSuccess && rp.rbytes == rb && rb > 0 && !bad)
            ok = recv_all(rm.fd, d.recv, rb);
        if (!ok) {
            say("rank %d lost the process holding its peers in collective #%llu %s", o->rank,
                (unsigned long long)o->seq, describe(d).c_str());
            err = ncclRemoteError;
        } else {
            err = rp.err;
        }
    }
    std::lock_guard<std::mutex> g(rm.mu);
    if (err && !rm.async_err) rm.async_err = err;
    ++rm.completed;
    rm.cv.notify_all();
}

