/*
 * nats_tool: what the TAP tests need of a NATS server with JetStream, since
 * there is no nats CLI here. test/lib/OutboxNats.pm compiles it (cc, libnats)
 * into the test's own directory and runs it.
 *
 *   nats_tool URL USER PASSWORD ping
 *       exit 0 when the server answers
 *   nats_tool URL USER PASSWORD ready
 *       exit 0 when the server answers and JetStream does
 *   nats_tool URL USER PASSWORD add-stream NAME SUBJECT[,SUBJECT...]
 *             [MAX_MSGS [new|old [MAX_MSG_SIZE]]]
 *   nats_tool URL USER PASSWORD purge NAME
 *   nats_tool URL USER PASSWORD count NAME
 *       the number of messages the stream holds
 *   nats_tool URL USER PASSWORD read NAME
 *       every message of the stream, one JSON object a line, in stream order:
 *       {"seq":1,"subject":"s","headers":{"name":"value",...},"data":"..."}
 *       (the first value of each header; data as a JSON string)
 *
 * Exits 1 with a message on stderr when something fails.
 */
#include <nats/nats.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
json_string(const char *s, int len)
{
    int i;

    putchar('"');
    for (i = 0; i < len; i++)
    {
        unsigned char c = (unsigned char) s[i];

        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static int
fail(const char *what, natsStatus s, jsErrCode err)
{
    const char *text = nats_GetLastError(NULL);

    fprintf(stderr, "nats_tool: %s: %s (status %d, JetStream error %d)\n", what,
            text != NULL ? text : natsStatus_GetText(s), (int) s, (int) err);
    return 1;
}

static int
read_stream(jsCtx *js, const char *name)
{
    jsStreamInfo *si = NULL;
    jsErrCode   err = 0;
    natsStatus  s;
    uint64_t    seq;

    s = js_GetStreamInfo(&si, js, name, NULL, &err);
    if (s != NATS_OK)
        return fail("stream info", s, err);
    if (si->State.Msgs == 0)
    {
        jsStreamInfo_Destroy(si);
        return 0;
    }
    for (seq = si->State.FirstSeq; seq <= si->State.LastSeq; seq++)
    {
        natsMsg    *msg = NULL;
        const char **keys = NULL;
        int         count = 0;
        int         k;

        s = js_GetMsg(&msg, js, name, seq, NULL, &err);
        if (s != NATS_OK)
            continue;           /* deleted */
        printf("{\"seq\":%llu,\"subject\":", (unsigned long long) seq);
        json_string(natsMsg_GetSubject(msg), (int) strlen(natsMsg_GetSubject(msg)));
        printf(",\"headers\":{");
        if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK)
        {
            for (k = 0; k < count; k++)
            {
                const char *value = NULL;

                natsMsgHeader_Get(msg, keys[k], &value);
                if (k > 0)
                    putchar(',');
                json_string(keys[k], (int) strlen(keys[k]));
                putchar(':');
                json_string(value != NULL ? value : "", value != NULL ? (int) strlen(value) : 0);
            }
            free((void *) keys);
        }
        printf("},\"data\":");
        json_string(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
        printf("}\n");
        natsMsg_Destroy(msg);
    }
    jsStreamInfo_Destroy(si);
    return 0;
}

int
main(int argc, char **argv)
{
    natsOptions *opts = NULL;
    natsConnection *nc = NULL;
    jsCtx      *js = NULL;
    jsErrCode   err = 0;
    natsStatus  s;
    const char *command;
    int         rc = 0;

    if (argc < 5)
    {
        fprintf(stderr, "usage: nats_tool URL USER PASSWORD COMMAND [ARGS...]\n");
        return 2;
    }
    command = argv[4];
    natsOptions_Create(&opts);
    natsOptions_SetURL(opts, argv[1]);
    if (argv[2][0] != '\0')
        natsOptions_SetUserInfo(opts, argv[2], argv[3]);
    natsOptions_SetTimeout(opts, 2000);
    natsOptions_SetAllowReconnect(opts, false);
    s = natsConnection_Connect(&nc, opts);
    if (s != NATS_OK)
        return fail("connect", s, 0);
    s = natsConnection_JetStream(&js, nc, NULL);
    if (s != NATS_OK)
        return fail("JetStream context", s, 0);

    if (strcmp(command, "ping") == 0)
        rc = 0;
    else if (strcmp(command, "ready") == 0)
    {
        natsMsg    *reply = NULL;

        s = natsConnection_RequestString(&reply, nc, "$JS.API.INFO", "", 2000);
        if (s != NATS_OK)
            rc = fail("JetStream info", s, 0);
        else
        {
            if (strstr(natsMsg_GetData(reply), "\"error\"") != NULL)
                rc = fail(natsMsg_GetData(reply), NATS_ERR, 0);
            natsMsg_Destroy(reply);
        }
    }
    else if (strcmp(command, "add-stream") == 0 && argc >= 7)
    {
        jsStreamConfig cfg;
        jsStreamInfo *si = NULL;
        const char *subjects[32];
        int         n = 0;
        char       *list = strdup(argv[6]);
        char       *save = NULL;
        char       *item;

        for (item = strtok_r(list, ",", &save); item != NULL && n < 32;
             item = strtok_r(NULL, ",", &save))
            subjects[n++] = item;
        jsStreamConfig_Init(&cfg);
        cfg.Name = argv[5];
        cfg.Subjects = subjects;
        cfg.SubjectsLen = n;
        cfg.Storage = js_FileStorage;
        if (argc >= 8)
            cfg.MaxMsgs = atoll(argv[7]);
        if (argc >= 9)
            cfg.Discard = strcmp(argv[8], "new") == 0 ? js_DiscardNew : js_DiscardOld;
        if (argc >= 10)
            cfg.MaxMsgSize = atoi(argv[9]);
        s = js_AddStream(&si, js, &cfg, NULL, &err);
        if (s != NATS_OK)
            rc = fail("add stream", s, err);
        else
            jsStreamInfo_Destroy(si);
        free(list);
    }
    else if (strcmp(command, "purge") == 0 && argc >= 6)
    {
        s = js_PurgeStream(js, argv[5], NULL, &err);
        if (s != NATS_OK)
            rc = fail("purge", s, err);
    }
    else if (strcmp(command, "count") == 0 && argc >= 6)
    {
        jsStreamInfo *si = NULL;

        s = js_GetStreamInfo(&si, js, argv[5], NULL, &err);
        if (s != NATS_OK)
            rc = fail("stream info", s, err);
        else
        {
            printf("%llu\n", (unsigned long long) si->State.Msgs);
            jsStreamInfo_Destroy(si);
        }
    }
    else if (strcmp(command, "read") == 0 && argc >= 6)
        rc = read_stream(js, argv[5]);
    else
    {
        fprintf(stderr, "nats_tool: unknown command or missing arguments: %s\n", command);
        rc = 2;
    }
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    natsOptions_Destroy(opts);
    return rc;
}
