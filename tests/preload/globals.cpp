// A C++ program whose containers are globals, built before main() by
// constructors that allocate (as libstdc++'s own constructor does): under
// the preload shim every one of those allocations must reach the policy.
// Prints a digest of what it built; the same output with and without the shim.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

static std::vector<std::string> names = { "alpha", "beta", "gamma, a name longer than SSO",
					  "delta, another name that allocates" };
static std::map<std::string, std::vector<int>> table = [] {
	std::map<std::string, std::vector<int>> m;
	for (int i = 0; i < 2000; i++)
		m["key-" + std::to_string(i * 7919 % 2003)] = std::vector<int>(i % 37, i);
	return m;
}();
static std::unordered_map<int, std::unique_ptr<std::string>> cache;

int main()
{
	unsigned long h = 1469598103934665603ul;
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 500; i++)
			cache[i] = std::make_unique<std::string>(i % 100 + 1, 'a' + i % 26);
		for (auto &kv : table)
			kv.second.push_back(round);
		cache.clear();
	}
	for (auto &kv : table) {
		for (char c : kv.first)
			h = (h ^ (unsigned char)c) * 1099511628211ul;
		for (int v : kv.second)
			h = (h ^ (unsigned)v) * 1099511628211ul;
	}
	for (auto &s : names)
		h = (h ^ s.size()) * 1099511628211ul;
	std::printf("%zu %016lx\n", table.size(), h);
	return 0;
}
