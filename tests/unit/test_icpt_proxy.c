/* Unit tests of the chained proxy's answer check (vault/icpt_proxy.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "vault/icpt_internal.h"

static int
status(const char *head)
{
	size_t consumed = 0;
	int code = icpt_proxy_status((const uint8_t *)head, strlen(head), &consumed);

	/* A whole answer is consumed to the end of its head, not further. */
	if (code > 0)
		assert_int_equal(consumed, strstr(head, "\r\n\r\n") + 4 - head);
	return code;
}

/* Only an HTTP/1.x status line gives a code; anything else is not an answer. */
static void
test_status_line(void **state)
{
	(void)state;
	assert_int_equal(status("HTTP/1.1 200 Connection established\r\n\r\n"), 200);
	assert_int_equal(status("HTTP/1.0 200 OK\r\nProxy-Agent: x\r\n\r\n"), 200);
	assert_int_equal(status("HTTP/1.1 204\r\n\r\n"), 204);
	assert_int_equal(status("HTTP/1.0 407 Proxy Authentication Required\r\n\r\n"), 407);
	assert_int_equal(status("HTTP/1.1 502 Bad Gateway\r\n\r\n"), 502);
	assert_int_equal(status("HTTP/1.0 401 Unauthorized\r\n\r\n"), 401);
	/* Not an answer: another protocol, a version we do not speak, a bad code. */
	assert_int_equal(status("SSH-2.0-x\r\n\r\n"), -1);
	assert_int_equal(status("HTTP/2 200 OK\r\n\r\n"), -1);
	assert_int_equal(status("HTTP/1.2 200 OK\r\n\r\n"), -1);
	assert_int_equal(status("HTTP/1.1 20 OK\r\n\r\n"), -1);
	assert_int_equal(status("HTTP/1.1 2000 OK\r\n\r\n"), -1);
	assert_int_equal(status("HTTP/1.1 099 x\r\n\r\n"), -1);
	assert_int_equal(status("HTTP/1.1 2x0 OK\r\n\r\n"), -1);
	assert_int_equal(status("HTTP/1.1  200 OK\r\n\r\n"), -1);
	assert_int_equal(status("http/1.1 200 OK\r\n\r\n"), -1);
	/* A control byte in the status line. */
	assert_int_equal(status("HTTP/1.1 200 O\x01K\r\n\r\n"), -1);
	/* A head not complete yet: more bytes are needed, nothing is decided. */
	assert_int_equal(status("HTTP/1.1 200 OK"), 0);
	assert_int_equal(status("HTTP/1.1 200 OK\r\nProxy-agent: x\r\n"), 0);
	/* The server's first bytes after the head stay for the tunnel. */
	assert_int_equal(status("HTTP/1.1 200 OK\r\n\r\nSSH-2.0-x\r\n\r\n"), 200);
	/* A head over the proxy's limit is refused, not waited for. */
	{
		static char big[9000];

		memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 21);
		memset(big + 21, 'a', sizeof(big) - 21);
		assert_int_equal(icpt_proxy_status((const uint8_t *)big, 8192, &(size_t){0}), -1);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_status_line),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
