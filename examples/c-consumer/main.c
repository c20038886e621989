/* The smallest C host of ember: load a model, stream a few tokens of a reply with
 * their ids and log-probabilities, save and restore the session's state.
 *   c-consumer MODEL.gguf [PROMPT]
 * Built against an installed ember with CMake (find_package(ember)) or with
 * pkg-config:  cc main.c $(pkg-config --cflags --libs ember)   (add --static for
 * the static library). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ember/ember.h>

static int print_token(int32_t token, const char* text, size_t length, float logprob, void* user) {
  int* count = (int*)user;
  if (token >= 0) {
    ++*count;
    fprintf(stderr, "[token %d, log p %.3f]\n", (int)token, (double)logprob);
  }
  fwrite(text, 1, length, stdout);
  fflush(stdout);
  return EMBER_CONTINUE;
}

static int fail(const char* what, ember_status status) {
  fprintf(stderr, "error: %s: %s (%s)\n", what, ember_last_error(), ember_status_name(status));
  return 1;
}

int main(int argc, char** argv) {
  const char* prompt = argc > 2 ? argv[2] : "The sky is";
  ember_model* model = NULL;
  ember_session* session = NULL;
  ember_session* restored = NULL;
  ember_sampler* sampler = NULL;
  ember_model_options model_options = ember_model_default_options();
  ember_sampler_options sampler_options = ember_sampler_default_options();
  ember_generate_options generate = ember_generate_default_options();
  ember_generate_result result;
  ember_status status;
  int streamed = 0;
  size_t state_size = 0;
  void* state = NULL;
  int rc = 1;

  if (argc < 2) {
    fprintf(stderr, "usage: c-consumer MODEL.gguf [PROMPT]\n");
    return 2;
  }
  model_options.threads = 2;
  if ((status = ember_model_load(argv[1], &model_options, &model)) != EMBER_OK) return fail("load", status);
  if ((status = ember_session_create(model, NULL, &session)) != EMBER_OK) {
    fail("session", status);
    goto done;
  }
  sampler_options.temperature = 0.0f;
  if ((status = ember_sampler_create(&sampler_options, &sampler)) != EMBER_OK) {
    fail("sampler", status);
    goto done;
  }
  generate.max_tokens = 8;
  generate.stop_at_end_of_generation = 0;
  generate.logprobs = 1;
  memset(&result, 0, sizeof(result));
  result.struct_size = sizeof(result);
  printf("ember %s (C API %d)\n%s", ember_version(), (int)ember_c_api_version(), prompt);
  status = ember_session_generate(session, prompt, sampler, &generate, print_token, &streamed, &result);
  if (status != EMBER_OK) {
    fail("generate", status);
    goto done;
  }
  printf("\n[%d tokens]\n", (int)result.n_tokens);

  /* The state round-trips into a new session. */
  ember_session_save_state(session, NULL, 0, &state_size); /* asks for the size */
  state = malloc(state_size);
  if (!state || (status = ember_session_save_state(session, state, state_size, &state_size)) != EMBER_OK ||
      (status = ember_session_create(model, NULL, &restored)) != EMBER_OK ||
      (status = ember_session_load_state(restored, state, state_size)) != EMBER_OK) {
    fail("state", status);
    goto done;
  }
  if (ember_session_position(restored) != ember_session_position(session)) {
    fprintf(stderr, "error: the restored session is at %d, not %d\n", (int)ember_session_position(restored),
            (int)ember_session_position(session));
    goto done;
  }
  rc = (result.n_tokens == 8 && streamed == 8) ? 0 : 1;

done:
  free(state);
  ember_sampler_free(sampler);
  ember_session_free(restored);
  ember_session_free(session);
  ember_model_free(model);
  return rc;
}
