// ember: embeddable LLM inference. Include this for the whole public API.
#pragma once

#include "ember/convert.hpp"
#include "ember/engine.hpp"
#include "ember/error.hpp"
#include "ember/export.hpp"
#include "ember/kv_cache.hpp"
#include "ember/log.hpp"
#include "ember/metrics.hpp"
#include "ember/model.hpp"
#include "ember/perplexity.hpp"
#include "ember/quantize.hpp"
#include "ember/sampler.hpp"
#include "ember/session.hpp"
#include "ember/version.hpp"
