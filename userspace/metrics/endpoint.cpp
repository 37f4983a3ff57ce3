#include "metrics/endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <prometheus/exposer.h>

#include "common/unique_fd.h"

namespace lotus::metrics {

namespace {

bool is_v6(const std::string& host) { return host.find(':') != std::string::npos; }

// Binding a socket of our own first turns a port in use into one clear line (civetweb's own failure says only
// that it could not start) and leaves nothing half-started.
void check_bindable(const BindAddress& at)
{
    sockaddr_storage ss{};
    socklen_t len = 0;
    int family = is_v6(at.host) ? AF_INET6 : AF_INET;
    if (family == AF_INET6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(static_cast<uint16_t>(at.port));
        inet_pton(AF_INET6, at.host.c_str(), &a->sin6_addr);
        len = sizeof(*a);
    } else {
        auto* a = reinterpret_cast<sockaddr_in*>(&ss);
        a->sin_family = AF_INET;
        a->sin_port = htons(static_cast<uint16_t>(at.port));
        inet_pton(AF_INET, at.host.c_str(), &a->sin_addr);
        len = sizeof(*a);
    }
    common::UniqueFd fd(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd)
        throw std::runtime_error(fmt::format("--metrics {}: cannot make a socket: {}", at.str(), strerror(errno)));
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)); // (as civetweb does: TIME_WAIT is no obstacle)
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
        throw std::runtime_error(fmt::format("--metrics {}: cannot listen there: {}{}", at.str(), strerror(errno),
                                             errno == EADDRINUSE ? " (another process has that port)" : ""));
}

} // namespace

std::string BindAddress::civetweb() const
{
    return is_v6(host) ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

std::string BindAddress::str() const { return civetweb(); }

BindAddress parse_bind_address(const std::string& text)
{
    auto colon = text.rfind(':');
    if (colon == std::string::npos)
        throw std::invalid_argument(fmt::format("wants HOST:PORT (e.g. 127.0.0.1:9464 or :9464), not '{}'", text));
    BindAddress a;
    a.host = text.substr(0, colon);
    std::string port = text.substr(colon + 1);
    if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']')
        a.host = a.host.substr(1, a.host.size() - 2);
    else if (is_v6(a.host))
        throw std::invalid_argument(fmt::format("an IPv6 address goes in brackets ([::1]:9464), not '{}'", text));
    if (a.host.empty() || a.host == "localhost")
        a.host = "127.0.0.1";
    char* end = nullptr;
    long n = strtol(port.c_str(), &end, 10);
    if (port.empty() || *end || n < 0 || n > 65535)
        throw std::invalid_argument(fmt::format("wants a port 0-65535 after the colon, not '{}'", port));
    a.port = static_cast<int>(n);
    unsigned char buf[sizeof(in6_addr)];
    if (inet_pton(is_v6(a.host) ? AF_INET6 : AF_INET, a.host.c_str(), buf) != 1)
        throw std::invalid_argument(fmt::format("wants a numeric IP address (or localhost) before the port, not '{}'",
                                                a.host));
    return a;
}

Endpoint::Endpoint(const BindAddress& at, std::shared_ptr<prometheus::Registry> registry) : registry_(std::move(registry))
{
    check_bindable(at);
    try {
        // One serving thread: Prometheus scrapes every few seconds, and the tracer takes no more of the CPUs.
        exposer_ = std::make_unique<prometheus::Exposer>(
            std::vector<std::string>{"listening_ports", at.civetweb(), "num_threads", "1"});
    } catch (const std::exception& e) {
        throw std::runtime_error(fmt::format("--metrics {}: cannot serve there: {}", at.str(), e.what()));
    }
    exposer_->RegisterCollectable(registry_);
    auto ports = exposer_->GetListeningPorts();
    port_ = ports.empty() ? at.port : ports.front();
}

void Endpoint::stop()
{
    if (!exposer_ || stopping_.joinable())
        return;
    stopping_ = std::thread([e = std::move(exposer_)]() mutable { e.reset(); });
}

Endpoint::~Endpoint()
{
    stop();
    if (stopping_.joinable())
        stopping_.join();
}

} // namespace lotus::metrics
