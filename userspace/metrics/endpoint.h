// The HTTP endpoint of --metrics: prometheus-cpp's exposer (civetweb) serving a registry at /metrics, in the text
// exposition format, from its own threads; the session only updates the registry.
#pragma once
#include <memory>
#include <string>
#include <thread>

#include <prometheus/registry.h>

namespace prometheus {
class Exposer;
}

namespace lotus::metrics {

// HOST:PORT as --metrics takes it: "127.0.0.1:9464", "0.0.0.0:9464", "[::1]:9464", or ":9464" (127.0.0.1).
struct BindAddress {
    std::string host; // a numeric IPv4 or IPv6 address
    int port = 0;
    std::string civetweb() const; // civetweb's listening_ports form
    std::string str() const;      // as said on stderr
};
// Throws std::invalid_argument with the reason.
BindAddress parse_bind_address(const std::string& text);

class Endpoint {
public:
    // Binds now: a port in use (or an address not of this machine) throws std::runtime_error, one line, before
    // anything is attached.
    Endpoint(const BindAddress& at, std::shared_ptr<prometheus::Registry> registry);
    ~Endpoint(); // waits for the stop begun by stop(), or stops now
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;
    // Begins to stop serving on a thread of its own (civetweb takes up to its poll interval to stop): the run's
    // outputs are written meanwhile.
    void stop();
    int port() const { return port_; } // the port bound (the one asked, or the kernel's choice for port 0)

private:
    std::unique_ptr<prometheus::Exposer> exposer_;
    std::shared_ptr<prometheus::Registry> registry_;
    std::thread stopping_;
    int port_ = 0;
};

} // namespace lotus::metrics
