/*
 * bind_addrs: rdma_bind_addr(3) on a new id for each address given, in
 * order, in one process (used by crates/compat-tests/tests/host_addrs.rs:
 * the device starts at the first address, the others are its other GIDs).
 *
 *   bind_addrs <addr>...
 *
 * Prints "bind <addr> ok" or "bind <addr> failed: <strerror>" per address;
 * exits 0 iff every bind worked.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <rdma/rdma_cma.h>

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	int bad = 0;

	if (!ch) {
		perror("rdma_create_event_channel");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		struct rdma_cm_id *id;
		struct sockaddr_storage ss;
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		memset(&ss, 0, sizeof(ss));
		if (inet_pton(AF_INET, argv[i], &sin->sin_addr) == 1) {
			sin->sin_family = AF_INET;
		} else if (inet_pton(AF_INET6, argv[i], &sin6->sin6_addr) == 1) {
			sin6->sin6_family = AF_INET6;
		} else {
			fprintf(stderr, "not an address: %s\n", argv[i]);
			return 1;
		}
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
			perror("rdma_create_id");
			return 1;
		}
		if (rdma_bind_addr(id, (struct sockaddr *)&ss)) {
			printf("bind %s failed: %s\n", argv[i], strerror(errno));
			bad = 1;
		} else {
			printf("bind %s ok\n", argv[i]);
		}
	}
	fflush(stdout);
	return bad;
}
