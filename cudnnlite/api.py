"""The cuDNN 9 C functions this project calls, each declared once: C signature in the docstring,
argtypes/restype set once, errcheck raising the CudnnError subclass for the returned status.

Arguments may be descriptor objects (they carry `_as_parameter_`), so a failing call's message
prints every descriptor's full setup. Device pointers are plain ints (`array.data.ptr`).
"""
import ctypes
import inspect
from ctypes import POINTER, Structure, c_char_p, c_double, c_float, c_int, c_size_t, c_void_p

from ._lib import lib
from .errors import raise_for

status_t = c_int          # cudnnStatus_t
handle_t = c_void_p       # cudnnHandle_t and every cudnn*Descriptor_t are opaque pointers
desc_t = c_void_p
enum_t = c_int
int_p = POINTER(c_int)
ptr = c_void_p            # device or host pointer


def last_error_string():
    buf = ctypes.create_string_buffer(1024)
    lib.cudnnGetLastErrorString(buf, c_size_t(len(buf)))
    return buf.value.decode(errors="replace")


lib.cudnnGetLastErrorString.argtypes = [c_char_p, c_size_t]
lib.cudnnGetLastErrorString.restype = None


def prototype_for(library, fail):
    """A `prototype` decorator for `library` (libcudnn here, libcublasLt in cudnnlite.blas):
    `fail(status, name, named_args)` raises for a non-zero status."""
    def prototype(*argtypes, restype=status_t):
        """Bind the C function named like the stub: argtypes/restype from here, argument names
        from the stub's signature (for error messages). Returns the ctypes function itself (no
        wrapper)."""
        def bind(stub):
            name = stub.__name__
            names = list(inspect.signature(stub).parameters)
            assert len(names) == len(argtypes), name
            fn = getattr(library, name)
            fn.argtypes = list(argtypes)
            fn.restype = restype
            fn.arg_names = tuple(names)     # for profilers (tools.kernels names each argument)
            if restype is status_t:
                def check(status, _fn, args):
                    if status:
                        fail(status, name, zip(names, args))
                    return status
                fn.errcheck = check
            return fn
        return bind
    return prototype


prototype = prototype_for(
    lib, lambda status, name, args: raise_for(status, name, args, last_error_string()))


class _AlgoPerf(Structure):
    _fields_ = [("algo", c_int), ("status", c_int), ("time", c_float), ("memory", c_size_t),
                ("determinism", c_int), ("mathType", c_int), ("reserved", c_int * 3)]


class ConvFwdAlgoPerf(_AlgoPerf):
    """cudnnConvolutionFwdAlgoPerf_t"""


class ConvBwdDataAlgoPerf(_AlgoPerf):
    """cudnnConvolutionBwdDataAlgoPerf_t"""


class ConvBwdFilterAlgoPerf(_AlgoPerf):
    """cudnnConvolutionBwdFilterAlgoPerf_t"""


# ---- library and handle ---------------------------------------------------------------------

@prototype(restype=c_size_t)
def cudnnGetVersion():
    """size_t cudnnGetVersion(void)"""


@prototype(restype=c_size_t)
def cudnnGetCudartVersion():
    """size_t cudnnGetCudartVersion(void)"""


@prototype(status_t, restype=c_char_p)
def cudnnGetErrorString(status):
    """const char *cudnnGetErrorString(cudnnStatus_t status)"""


@prototype(POINTER(handle_t))
def cudnnCreate(handle):
    """cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)"""


@prototype(handle_t)
def cudnnDestroy(handle):
    """cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)"""


@prototype(handle_t, c_void_p)
def cudnnSetStream(handle, streamId):
    """cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId)"""


@prototype(handle_t, POINTER(c_void_p))
def cudnnGetStream(handle, streamId):
    """cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId)"""


# ---- tensor descriptor ----------------------------------------------------------------------

@prototype(POINTER(desc_t))
def cudnnCreateTensorDescriptor(tensorDesc):
    """cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc)"""


@prototype(desc_t)
def cudnnDestroyTensorDescriptor(tensorDesc):
    """cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc)"""


@prototype(desc_t, enum_t, c_int, int_p, int_p)
def cudnnSetTensorNdDescriptor(tensorDesc, dataType, nbDims, dimA, strideA):
    """cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t tensorDesc,
        cudnnDataType_t dataType, int nbDims, const int dimA[], const int strideA[])"""


@prototype(desc_t, c_int, POINTER(enum_t), int_p, int_p, int_p)
def cudnnGetTensorNdDescriptor(tensorDesc, nbDimsRequested, dataType, nbDims, dimA, strideA):
    """cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t tensorDesc,
        int nbDimsRequested, cudnnDataType_t *dataType, int *nbDims, int dimA[], int strideA[])"""


# ---- filter descriptor ----------------------------------------------------------------------

@prototype(POINTER(desc_t))
def cudnnCreateFilterDescriptor(filterDesc):
    """cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc)"""


@prototype(desc_t)
def cudnnDestroyFilterDescriptor(filterDesc):
    """cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc)"""


@prototype(desc_t, enum_t, enum_t, c_int, int_p)
def cudnnSetFilterNdDescriptor(filterDesc, dataType, format, nbDims, filterDimA):
    """cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t filterDesc,
        cudnnDataType_t dataType, cudnnTensorFormat_t format, int nbDims, const int filterDimA[])"""


@prototype(desc_t, c_int, POINTER(enum_t), POINTER(enum_t), int_p, int_p)
def cudnnGetFilterNdDescriptor(filterDesc, nbDimsRequested, dataType, format, nbDims, filterDimA):
    """cudnnStatus_t cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t filterDesc,
        int nbDimsRequested, cudnnDataType_t *dataType, cudnnTensorFormat_t *format, int *nbDims,
        int filterDimA[])"""


# ---- convolution descriptor -----------------------------------------------------------------

@prototype(POINTER(desc_t))
def cudnnCreateConvolutionDescriptor(convDesc):
    """cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc)"""


@prototype(desc_t)
def cudnnDestroyConvolutionDescriptor(convDesc):
    """cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc)"""


@prototype(desc_t, c_int, int_p, int_p, int_p, enum_t, enum_t)
def cudnnSetConvolutionNdDescriptor(convDesc, arrayLength, padA, filterStrideA, dilationA, mode,
                                    computeType):
    """cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t convDesc,
        int arrayLength, const int padA[], const int filterStrideA[], const int dilationA[],
        cudnnConvolutionMode_t mode, cudnnDataType_t computeType)"""


@prototype(desc_t, c_int, int_p, int_p, int_p, int_p, POINTER(enum_t), POINTER(enum_t))
def cudnnGetConvolutionNdDescriptor(convDesc, arrayLengthRequested, arrayLength, padA, strideA,
                                    dilationA, mode, computeType):
    """cudnnStatus_t cudnnGetConvolutionNdDescriptor(const cudnnConvolutionDescriptor_t convDesc,
        int arrayLengthRequested, int *arrayLength, int padA[], int strideA[], int dilationA[],
        cudnnConvolutionMode_t *mode, cudnnDataType_t *computeType)"""


@prototype(desc_t, c_int)
def cudnnSetConvolutionGroupCount(convDesc, groupCount):
    """cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc,
        int groupCount)"""


@prototype(desc_t, int_p)
def cudnnGetConvolutionGroupCount(convDesc, groupCount):
    """cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc,
        int *groupCount)"""


@prototype(desc_t, enum_t)
def cudnnSetConvolutionMathType(convDesc, mathType):
    """cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
        cudnnMathType_t mathType)"""


@prototype(desc_t, POINTER(enum_t))
def cudnnGetConvolutionMathType(convDesc, mathType):
    """cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
        cudnnMathType_t *mathType)"""


@prototype(desc_t, desc_t, desc_t, c_int, int_p)
def cudnnGetConvolutionNdForwardOutputDim(convDesc, inputTensorDesc, filterDesc, nbDims,
                                          tensorOuputDimA):
    """cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(
        const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t inputTensorDesc,
        const cudnnFilterDescriptor_t filterDesc, int nbDims, int tensorOuputDimA[])"""


# ---- convolution: algorithm choice ----------------------------------------------------------

@prototype(handle_t, int_p)
def cudnnGetConvolutionForwardAlgorithmMaxCount(handle, count):
    """cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int *count)"""


@prototype(handle_t, int_p)
def cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, count):
    """cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle,
        int *count)"""


@prototype(handle_t, int_p)
def cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, count):
    """cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle,
        int *count)"""


@prototype(handle_t, desc_t, desc_t, desc_t, desc_t, c_int, int_p, POINTER(ConvFwdAlgoPerf))
def cudnnGetConvolutionForwardAlgorithm_v7(handle, srcDesc, filterDesc, convDesc, destDesc,
                                           requestedAlgoCount, returnedAlgoCount, perfResults):
    """cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle,
        const cudnnTensorDescriptor_t srcDesc, const cudnnFilterDescriptor_t filterDesc,
        const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t destDesc,
        const int requestedAlgoCount, int *returnedAlgoCount,
        cudnnConvolutionFwdAlgoPerf_t *perfResults)"""


@prototype(handle_t, desc_t, desc_t, desc_t, desc_t, c_int, int_p, POINTER(ConvBwdDataAlgoPerf))
def cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, filterDesc, diffDesc, convDesc, gradDesc,
                                                requestedAlgoCount, returnedAlgoCount, perfResults):
    """cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle,
        const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc,
        const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc,
        const int requestedAlgoCount, int *returnedAlgoCount,
        cudnnConvolutionBwdDataAlgoPerf_t *perfResults)"""


@prototype(handle_t, desc_t, desc_t, desc_t, desc_t, c_int, int_p, POINTER(ConvBwdFilterAlgoPerf))
def cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, srcDesc, diffDesc, convDesc, gradDesc,
                                                  requestedAlgoCount, returnedAlgoCount,
                                                  perfResults):
    """cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle,
        const cudnnTensorDescriptor_t srcDesc, const cudnnTensorDescriptor_t diffDesc,
        const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
        const int requestedAlgoCount, int *returnedAlgoCount,
        cudnnConvolutionBwdFilterAlgoPerf_t *perfResults)"""


@prototype(handle_t, desc_t, ptr, desc_t, ptr, desc_t, desc_t, ptr, c_int, int_p,
           POINTER(ConvFwdAlgoPerf), ptr, c_size_t)
def cudnnFindConvolutionForwardAlgorithmEx(handle, xDesc, x, wDesc, w, convDesc, yDesc, y,
                                           requestedAlgoCount, returnedAlgoCount, perfResults,
                                           workSpace, workSpaceSizeInBytes):
    """cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t handle,
        const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnFilterDescriptor_t wDesc,
        const void *w, const cudnnConvolutionDescriptor_t convDesc,
        const cudnnTensorDescriptor_t yDesc, void *y, const int requestedAlgoCount,
        int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults, void *workSpace,
        size_t workSpaceSizeInBytes)"""


@prototype(handle_t, desc_t, ptr, desc_t, ptr, desc_t, desc_t, ptr, c_int, int_p,
           POINTER(ConvBwdDataAlgoPerf), ptr, c_size_t)
def cudnnFindConvolutionBackwardDataAlgorithmEx(handle, wDesc, w, dyDesc, dy, convDesc, dxDesc, dx,
                                                requestedAlgoCount, returnedAlgoCount, perfResults,
                                                workSpace, workSpaceSizeInBytes):
    """cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t handle,
        const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnTensorDescriptor_t dyDesc,
        const void *dy, const cudnnConvolutionDescriptor_t convDesc,
        const cudnnTensorDescriptor_t dxDesc, void *dx, const int requestedAlgoCount,
        int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void *workSpace,
        size_t workSpaceSizeInBytes)"""


@prototype(handle_t, desc_t, ptr, desc_t, ptr, desc_t, desc_t, ptr, c_int, int_p,
           POINTER(ConvBwdFilterAlgoPerf), ptr, c_size_t)
def cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, xDesc, x, dyDesc, y, convDesc, dwDesc, dw,
                                                  requestedAlgoCount, returnedAlgoCount,
                                                  perfResults, workSpace, workSpaceSizeInBytes):
    """cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t handle,
        const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t dyDesc,
        const void *y, const cudnnConvolutionDescriptor_t convDesc,
        const cudnnFilterDescriptor_t dwDesc, void *dw, const int requestedAlgoCount,
        int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults,
        void *workSpace, size_t workSpaceSizeInBytes)"""


@prototype(handle_t, desc_t, desc_t, desc_t, desc_t, enum_t, POINTER(c_size_t))
def cudnnGetConvolutionForwardWorkspaceSize(handle, xDesc, wDesc, convDesc, yDesc, algo,
                                            sizeInBytes):
    """cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle,
        const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc,
        const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
        cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes)"""


@prototype(handle_t, desc_t, desc_t, desc_t, desc_t, enum_t, POINTER(c_size_t))
def cudnnGetConvolutionBackwardDataWorkspaceSize(handle, wDesc, dyDesc, convDesc, dxDesc, algo,
                                                 sizeInBytes):
    """cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle,
        const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
        const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
        cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes)"""


@prototype(handle_t, desc_t, desc_t, desc_t, desc_t, enum_t, POINTER(c_size_t))
def cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, xDesc, dyDesc, convDesc, gradDesc, algo,
                                                   sizeInBytes):
    """cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle,
        const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
        const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
        cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes)"""


# ---- convolution: compute -------------------------------------------------------------------

@prototype(handle_t, ptr, desc_t, ptr, desc_t, ptr, desc_t, enum_t, ptr, c_size_t, ptr, desc_t, ptr)
def cudnnConvolutionForward(handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                            workSpaceSizeInBytes, beta, yDesc, y):
    """cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha,
        const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnFilterDescriptor_t wDesc,
        const void *w, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
        void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
        const cudnnTensorDescriptor_t yDesc, void *y)"""


@prototype(handle_t, ptr, desc_t, ptr, desc_t, ptr, desc_t, enum_t, ptr, c_size_t, ptr, desc_t, ptr)
def cudnnConvolutionBackwardData(handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace,
                                 workSpaceSizeInBytes, beta, dxDesc, dx):
    """cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
        const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnTensorDescriptor_t dyDesc,
        const void *dy, const cudnnConvolutionDescriptor_t convDesc,
        cudnnConvolutionBwdDataAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes,
        const void *beta, const cudnnTensorDescriptor_t dxDesc, void *dx)"""


@prototype(handle_t, ptr, desc_t, ptr, desc_t, ptr, desc_t, enum_t, ptr, c_size_t, ptr, desc_t, ptr)
def cudnnConvolutionBackwardFilter(handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace,
                                   workSpaceSizeInBytes, beta, dwDesc, dw):
    """cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
        const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t dyDesc,
        const void *dy, const cudnnConvolutionDescriptor_t convDesc,
        cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes,
        const void *beta, const cudnnFilterDescriptor_t dwDesc, void *dw)"""


@prototype(handle_t, ptr, desc_t, ptr, ptr, desc_t, ptr)
def cudnnConvolutionBackwardBias(handle, alpha, dyDesc, dy, beta, dbDesc, db):
    """cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t handle, const void *alpha,
        const cudnnTensorDescriptor_t dyDesc, const void *dy, const void *beta,
        const cudnnTensorDescriptor_t dbDesc, void *db)"""


# ---- activation and tensor arithmetic -------------------------------------------------------

@prototype(POINTER(desc_t))
def cudnnCreateActivationDescriptor(activationDesc):
    """cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t *activationDesc)"""


@prototype(desc_t)
def cudnnDestroyActivationDescriptor(activationDesc):
    """cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t activationDesc)"""


@prototype(desc_t, enum_t, enum_t, c_double)
def cudnnSetActivationDescriptor(activationDesc, mode, reluNanOpt, coef):
    """cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t activationDesc,
        cudnnActivationMode_t mode, cudnnNanPropagation_t reluNanOpt, double coef)"""


@prototype(desc_t, POINTER(enum_t), POINTER(enum_t), POINTER(c_double))
def cudnnGetActivationDescriptor(activationDesc, mode, reluNanOpt, coef):
    """cudnnStatus_t cudnnGetActivationDescriptor(const cudnnActivationDescriptor_t activationDesc,
        cudnnActivationMode_t *mode, cudnnNanPropagation_t *reluNanOpt, double *coef)"""


@prototype(handle_t, desc_t, ptr, desc_t, ptr, ptr, desc_t, ptr)
def cudnnActivationForward(handle, activationDesc, alpha, xDesc, x, beta, yDesc, y):
    """cudnnStatus_t cudnnActivationForward(cudnnHandle_t handle,
        cudnnActivationDescriptor_t activationDesc, const void *alpha,
        const cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
        const cudnnTensorDescriptor_t yDesc, void *y)"""


@prototype(handle_t, desc_t, ptr, desc_t, ptr, desc_t, ptr, desc_t, ptr, ptr, desc_t, ptr)
def cudnnActivationBackward(handle, activationDesc, alpha, yDesc, y, dyDesc, dy, xDesc, x, beta,
                            dxDesc, dx):
    """cudnnStatus_t cudnnActivationBackward(cudnnHandle_t handle,
        cudnnActivationDescriptor_t activationDesc, const void *alpha,
        const cudnnTensorDescriptor_t yDesc, const void *y, const cudnnTensorDescriptor_t dyDesc,
        const void *dy, const cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
        const cudnnTensorDescriptor_t dxDesc, void *dx)"""


@prototype(handle_t, ptr, desc_t, ptr, ptr, desc_t, ptr)
def cudnnAddTensor(handle, alpha, aDesc, A, beta, cDesc, C):
    """cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void *alpha,
        const cudnnTensorDescriptor_t aDesc, const void *A, const void *beta,
        const cudnnTensorDescriptor_t cDesc, void *C)"""


@prototype(handle_t, desc_t, ptr, ptr)
def cudnnScaleTensor(handle, yDesc, y, alpha):
    """cudnnStatus_t cudnnScaleTensor(cudnnHandle_t handle, const cudnnTensorDescriptor_t yDesc,
        void *y, const void *alpha)"""


# ---- batch normalization --------------------------------------------------------------------

@prototype(desc_t, desc_t, enum_t)
def cudnnDeriveBNTensorDescriptor(derivedBnDesc, xDesc, mode):
    """cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derivedBnDesc,
        const cudnnTensorDescriptor_t xDesc, cudnnBatchNormMode_t mode)"""


@prototype(handle_t, enum_t, ptr, ptr, desc_t, ptr, desc_t, ptr, desc_t, ptr, ptr, c_double, ptr,
           ptr, c_double, ptr, ptr)
def cudnnBatchNormalizationForwardTraining(handle, mode, alpha, beta, xDesc, x, yDesc, y,
                                           bnScaleBiasMeanVarDesc, bnScale, bnBias,
                                           exponentialAverageFactor, resultRunningMean,
                                           resultRunningVariance, epsilon, resultSaveMean,
                                           resultSaveInvVariance):
    """cudnnStatus_t cudnnBatchNormalizationForwardTraining(cudnnHandle_t handle,
        cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
        const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t yDesc,
        void *y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
        const void *bnBias, double exponentialAverageFactor, void *resultRunningMean,
        void *resultRunningVariance, double epsilon, void *resultSaveMean,
        void *resultSaveInvVariance)"""


@prototype(handle_t, enum_t, ptr, ptr, desc_t, ptr, desc_t, ptr, desc_t, ptr, ptr, ptr, ptr,
           c_double)
def cudnnBatchNormalizationForwardInference(handle, mode, alpha, beta, xDesc, x, yDesc, y,
                                            bnScaleBiasMeanVarDesc, bnScale, bnBias, estimatedMean,
                                            estimatedVariance, epsilon):
    """cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t handle,
        cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
        const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t yDesc,
        void *y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
        const void *bnBias, const void *estimatedMean, const void *estimatedVariance,
        double epsilon)"""


@prototype(handle_t, enum_t, ptr, ptr, ptr, ptr, desc_t, ptr, desc_t, ptr, desc_t, ptr, desc_t, ptr,
           ptr, ptr, c_double, ptr, ptr)
def cudnnBatchNormalizationBackward(handle, mode, alphaDataDiff, betaDataDiff, alphaParamDiff,
                                    betaParamDiff, xDesc, x, dyDesc, dy, dxDesc, dx,
                                    dBnScaleBiasDesc, bnScale, dBnScaleResult, dBnBiasResult,
                                    epsilon, savedMean, savedInvVariance):
    """cudnnStatus_t cudnnBatchNormalizationBackward(cudnnHandle_t handle,
        cudnnBatchNormMode_t mode, const void *alphaDataDiff, const void *betaDataDiff,
        const void *alphaParamDiff, const void *betaParamDiff, const cudnnTensorDescriptor_t xDesc,
        const void *x, const cudnnTensorDescriptor_t dyDesc, const void *dy,
        const cudnnTensorDescriptor_t dxDesc, void *dx,
        const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScale, void *dBnScaleResult,
        void *dBnBiasResult, double epsilon, const void *savedMean, const void *savedInvVariance)"""


@prototype(handle_t, enum_t, enum_t, desc_t, desc_t, desc_t, desc_t, desc_t, POINTER(c_size_t))
def cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, mode, bnOps, xDesc, zDesc,
                                                             yDesc, bnScaleBiasMeanVarDesc,
                                                             activationDesc, sizeInBytes):
    """cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
        const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t zDesc,
        const cudnnTensorDescriptor_t yDesc, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
        const cudnnActivationDescriptor_t activationDesc, size_t *sizeInBytes)"""


@prototype(handle_t, enum_t, enum_t, desc_t, desc_t, POINTER(c_size_t))
def cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, bnOps, activationDesc,
                                                         xDesc, sizeInBytes):
    """cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t handle,
        cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
        const cudnnActivationDescriptor_t activationDesc, const cudnnTensorDescriptor_t xDesc,
        size_t *sizeInBytes)"""


@prototype(handle_t, enum_t, enum_t, desc_t, desc_t, desc_t, desc_t, desc_t, desc_t, desc_t,
           POINTER(c_size_t))
def cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, mode, bnOps, xDesc, yDesc, dyDesc,
                                                      dzDesc, dxDesc, dBnScaleBiasDesc,
                                                      activationDesc, sizeInBytes):
    """cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(cudnnHandle_t handle,
        cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps, const cudnnTensorDescriptor_t xDesc,
        const cudnnTensorDescriptor_t yDesc, const cudnnTensorDescriptor_t dyDesc,
        const cudnnTensorDescriptor_t dzDesc, const cudnnTensorDescriptor_t dxDesc,
        const cudnnTensorDescriptor_t dBnScaleBiasDesc,
        const cudnnActivationDescriptor_t activationDesc, size_t *sizeInBytes)"""


@prototype(handle_t, enum_t, enum_t, ptr, ptr, desc_t, ptr, desc_t, ptr, desc_t, ptr, desc_t, ptr,
           ptr, c_double, ptr, ptr, c_double, ptr, ptr, desc_t, ptr, c_size_t, ptr, c_size_t)
def cudnnBatchNormalizationForwardTrainingEx(handle, mode, bnOps, alpha, beta, xDesc, xData,
                                             zDesc, zData, yDesc, yData, bnScaleBiasMeanVarDesc,
                                             bnScale, bnBias, exponentialAverageFactor,
                                             resultRunningMean, resultRunningVariance, epsilon,
                                             resultSaveMean, resultSaveInvVariance,
                                             activationDesc, workspace, workSpaceSizeInBytes,
                                             reserveSpace, reserveSpaceSizeInBytes):
    """cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(cudnnHandle_t handle,
        cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps, const void *alpha,
        const void *beta, const cudnnTensorDescriptor_t xDesc, const void *xData,
        const cudnnTensorDescriptor_t zDesc, const void *zData,
        const cudnnTensorDescriptor_t yDesc, void *yData,
        const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
        const void *bnBias, double exponentialAverageFactor, void *resultRunningMean,
        void *resultRunningVariance, double epsilon, void *resultSaveMean,
        void *resultSaveInvVariance, cudnnActivationDescriptor_t activationDesc, void *workspace,
        size_t workSpaceSizeInBytes, void *reserveSpace, size_t reserveSpaceSizeInBytes)"""


@prototype(handle_t, enum_t, enum_t, ptr, ptr, ptr, ptr, desc_t, ptr, desc_t, ptr, desc_t, ptr,
           desc_t, ptr, desc_t, ptr, desc_t, ptr, ptr, ptr, ptr, c_double, ptr, ptr, desc_t, ptr,
           c_size_t, ptr, c_size_t)
def cudnnBatchNormalizationBackwardEx(handle, mode, bnOps, alphaDataDiff, betaDataDiff,
                                      alphaParamDiff, betaParamDiff, xDesc, xData, yDesc, yData,
                                      dyDesc, dyData, dzDesc, dzData, dxDesc, dxData,
                                      dBnScaleBiasDesc, bnScaleData, bnBiasData, dBnScaleData,
                                      dBnBiasData, epsilon, savedMean, savedInvVariance,
                                      activationDesc, workSpace, workSpaceSizeInBytes,
                                      reserveSpace, reserveSpaceSizeInBytes):
    """cudnnStatus_t cudnnBatchNormalizationBackwardEx(cudnnHandle_t handle,
        cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps, const void *alphaDataDiff,
        const void *betaDataDiff, const void *alphaParamDiff, const void *betaParamDiff,
        const cudnnTensorDescriptor_t xDesc, const void *xData,
        const cudnnTensorDescriptor_t yDesc, const void *yData,
        const cudnnTensorDescriptor_t dyDesc, const void *dyData,
        const cudnnTensorDescriptor_t dzDesc, void *dzData, const cudnnTensorDescriptor_t dxDesc,
        void *dxData, const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScaleData,
        const void *bnBiasData, void *dBnScaleData, void *dBnBiasData, double epsilon,
        const void *savedMean, const void *savedInvVariance,
        cudnnActivationDescriptor_t activationDesc, void *workSpace, size_t workSpaceSizeInBytes,
        void *reserveSpace, size_t reserveSpaceSizeInBytes)"""


# ---- dropout and RNN (the v8 API; the v6 RNN API is gone in cuDNN 9) ----------------------

@prototype(POINTER(desc_t))
def cudnnCreateDropoutDescriptor(dropoutDesc):
    """cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t *dropoutDesc)"""


@prototype(desc_t)
def cudnnDestroyDropoutDescriptor(dropoutDesc):
    """cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc)"""


@prototype(handle_t, POINTER(c_size_t))
def cudnnDropoutGetStatesSize(handle, sizeInBytes):
    """cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t handle, size_t *sizeInBytes)"""


@prototype(desc_t, handle_t, c_float, ptr, c_size_t, ctypes.c_ulonglong)
def cudnnSetDropoutDescriptor(dropoutDesc, handle, dropout, states, stateSizeInBytes, seed):
    """cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc,
        cudnnHandle_t handle, float dropout, void *states, size_t stateSizeInBytes,
        unsigned long long seed)"""


@prototype(desc_t, handle_t, POINTER(c_float), POINTER(c_void_p), POINTER(ctypes.c_ulonglong))
def cudnnGetDropoutDescriptor(dropoutDesc, handle, dropout, states, seed):
    """cudnnStatus_t cudnnGetDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc,
        cudnnHandle_t handle, float *dropout, void **states, unsigned long long *seed)"""


@prototype(POINTER(desc_t))
def cudnnCreateRNNDescriptor(rnnDesc):
    """cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t *rnnDesc)"""


@prototype(desc_t)
def cudnnDestroyRNNDescriptor(rnnDesc):
    """cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t rnnDesc)"""


i32 = ctypes.c_int32
i32_p = POINTER(i32)


@prototype(desc_t, enum_t, enum_t, enum_t, enum_t, enum_t, enum_t, enum_t, enum_t, i32, i32, i32,
           i32, desc_t, ctypes.c_uint32)
def cudnnSetRNNDescriptor_v8(rnnDesc, algo, cellMode, biasMode, dirMode, inputMode, dataType,
                             mathPrec, mathType, inputSize, hiddenSize, projSize, numLayers,
                             dropoutDesc, auxFlags):
    """cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t rnnDesc, cudnnRNNAlgo_t algo,
        cudnnRNNMode_t cellMode, cudnnRNNBiasMode_t biasMode, cudnnDirectionMode_t dirMode,
        cudnnRNNInputMode_t inputMode, cudnnDataType_t dataType, cudnnDataType_t mathPrec,
        cudnnMathType_t mathType, int32_t inputSize, int32_t hiddenSize, int32_t projSize,
        int32_t numLayers, cudnnDropoutDescriptor_t dropoutDesc, uint32_t auxFlags)"""


@prototype(desc_t, POINTER(enum_t), POINTER(enum_t), POINTER(enum_t), POINTER(enum_t),
           POINTER(enum_t), POINTER(enum_t), POINTER(enum_t), POINTER(enum_t), i32_p, i32_p,
           i32_p, i32_p, POINTER(c_void_p), POINTER(ctypes.c_uint32))
def cudnnGetRNNDescriptor_v8(rnnDesc, algo, cellMode, biasMode, dirMode, inputMode, dataType,
                             mathPrec, mathType, inputSize, hiddenSize, projSize, numLayers,
                             dropoutDesc, auxFlags):
    """cudnnStatus_t cudnnGetRNNDescriptor_v8(cudnnRNNDescriptor_t rnnDesc, cudnnRNNAlgo_t *algo,
        cudnnRNNMode_t *cellMode, cudnnRNNBiasMode_t *biasMode, cudnnDirectionMode_t *dirMode,
        cudnnRNNInputMode_t *inputMode, cudnnDataType_t *dataType, cudnnDataType_t *mathPrec,
        cudnnMathType_t *mathType, int32_t *inputSize, int32_t *hiddenSize, int32_t *projSize,
        int32_t *numLayers, cudnnDropoutDescriptor_t *dropoutDesc, uint32_t *auxFlags)"""


@prototype(POINTER(desc_t))
def cudnnCreateRNNDataDescriptor(rnnDataDesc):
    """cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t *rnnDataDesc)"""


@prototype(desc_t)
def cudnnDestroyRNNDataDescriptor(rnnDataDesc):
    """cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t rnnDataDesc)"""


@prototype(desc_t, enum_t, enum_t, c_int, c_int, c_int, int_p, ptr)
def cudnnSetRNNDataDescriptor(rnnDataDesc, dataType, layout, maxSeqLength, batchSize, vectorSize,
                              seqLengthArray, paddingFill):
    """cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t rnnDataDesc,
        cudnnDataType_t dataType, cudnnRNNDataLayout_t layout, int maxSeqLength, int batchSize,
        int vectorSize, const int seqLengthArray[], void *paddingFill)"""


@prototype(desc_t, POINTER(enum_t), POINTER(enum_t), int_p, int_p, int_p, c_int, int_p, ptr)
def cudnnGetRNNDataDescriptor(rnnDataDesc, dataType, layout, maxSeqLength, batchSize, vectorSize,
                              arrayLengthRequested, seqLengthArray, paddingFill):
    """cudnnStatus_t cudnnGetRNNDataDescriptor(cudnnRNNDataDescriptor_t rnnDataDesc,
        cudnnDataType_t *dataType, cudnnRNNDataLayout_t *layout, int *maxSeqLength,
        int *batchSize, int *vectorSize, int arrayLengthRequested, int seqLengthArray[],
        void *paddingFill)"""


@prototype(handle_t, desc_t, POINTER(c_size_t))
def cudnnGetRNNWeightSpaceSize(handle, rnnDesc, weightSpaceSize):
    """cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        size_t *weightSpaceSize)"""


@prototype(handle_t, desc_t, i32, c_size_t, ptr, i32, desc_t, POINTER(c_void_p), desc_t,
           POINTER(c_void_p))
def cudnnGetRNNWeightParams(handle, rnnDesc, pseudoLayer, weightSpaceSize, weightSpace, linLayerID,
                            mDesc, mAddr, bDesc, bAddr):
    """cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        int32_t pseudoLayer, size_t weightSpaceSize, const void *weightSpace, int32_t linLayerID,
        cudnnTensorDescriptor_t mDesc, void **mAddr, cudnnTensorDescriptor_t bDesc,
        void **bAddr)"""


@prototype(handle_t, desc_t, enum_t, desc_t, POINTER(c_size_t), POINTER(c_size_t))
def cudnnGetRNNTempSpaceSizes(handle, rnnDesc, fwdMode, xDesc, workSpaceSize, reserveSpaceSize):
    """cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        cudnnForwardMode_t fwdMode, cudnnRNNDataDescriptor_t xDesc, size_t *workSpaceSize,
        size_t *reserveSpaceSize)"""


@prototype(handle_t, desc_t, enum_t, ptr, desc_t, ptr, desc_t, ptr, desc_t, ptr, ptr, desc_t, ptr,
           ptr, c_size_t, ptr, c_size_t, ptr, c_size_t, ptr)
def cudnnRNNForward(handle, rnnDesc, fwdMode, devSeqLengths, xDesc, x, yDesc, y, hDesc, hx, hy,
                    cDesc, cx, cy, weightSpaceSize, weightSpace, workSpaceSize, workSpace,
                    reserveSpaceSize, reserveSpace):
    """cudnnStatus_t cudnnRNNForward(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        cudnnForwardMode_t fwdMode, const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t xDesc,
        const void *x, cudnnRNNDataDescriptor_t yDesc, void *y, cudnnTensorDescriptor_t hDesc,
        const void *hx, void *hy, cudnnTensorDescriptor_t cDesc, const void *cx, void *cy,
        size_t weightSpaceSize, const void *weightSpace, size_t workSpaceSize, void *workSpace,
        size_t reserveSpaceSize, void *reserveSpace)"""


@prototype(handle_t, desc_t, ptr, desc_t, ptr, ptr, desc_t, ptr, desc_t, ptr, ptr, ptr, desc_t, ptr,
           ptr, ptr, c_size_t, ptr, c_size_t, ptr, c_size_t, ptr)
def cudnnRNNBackwardData_v8(handle, rnnDesc, devSeqLengths, yDesc, y, dy, xDesc, dx, hDesc, hx,
                            dhy, dhx, cDesc, cx, dcy, dcx, weightSpaceSize, weightSpace,
                            workSpaceSize, workSpace, reserveSpaceSize, reserveSpace):
    """cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t yDesc, const void *y,
        const void *dy, cudnnRNNDataDescriptor_t xDesc, void *dx, cudnnTensorDescriptor_t hDesc,
        const void *hx, const void *dhy, void *dhx, cudnnTensorDescriptor_t cDesc,
        const void *cx, const void *dcy, void *dcx, size_t weightSpaceSize,
        const void *weightSpace, size_t workSpaceSize, void *workSpace, size_t reserveSpaceSize,
        void *reserveSpace)"""


@prototype(handle_t, desc_t, enum_t, ptr, desc_t, ptr, desc_t, ptr, desc_t, ptr, c_size_t, ptr,
           c_size_t, ptr, c_size_t, ptr)
def cudnnRNNBackwardWeights_v8(handle, rnnDesc, addGrad, devSeqLengths, xDesc, x, hDesc, hx, yDesc,
                               y, weightSpaceSize, dweightSpace, workSpaceSize, workSpace,
                               reserveSpaceSize, reserveSpace):
    """cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
        cudnnWgradMode_t addGrad, const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t xDesc,
        const void *x, cudnnTensorDescriptor_t hDesc, const void *hx,
        cudnnRNNDataDescriptor_t yDesc, const void *y, size_t weightSpaceSize,
        void *dweightSpace, size_t workSpaceSize, void *workSpace, size_t reserveSpaceSize,
        void *reserveSpace)"""


# ---- the backend (graph) API: descriptors of any kind, set / read by attribute ------------------

@prototype(enum_t, POINTER(desc_t))
def cudnnBackendCreateDescriptor(descriptorType, descriptor):
    """cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
        cudnnBackendDescriptor_t *descriptor)"""


@prototype(desc_t)
def cudnnBackendDestroyDescriptor(descriptor):
    """cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor)"""


@prototype(desc_t, enum_t, enum_t, ctypes.c_int64, ptr)
def cudnnBackendSetAttribute(descriptor, attributeName, attributeType, elementCount,
                             arrayOfElements):
    """cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
        cudnnBackendAttributeName_t attributeName, cudnnBackendAttributeType_t attributeType,
        int64_t elementCount, const void *arrayOfElements)"""


@prototype(desc_t, enum_t, enum_t, ctypes.c_int64, POINTER(ctypes.c_int64), ptr)
def cudnnBackendGetAttribute(descriptor, attributeName, attributeType, requestedElementCount,
                             elementCount, arrayOfElements):
    """cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
        cudnnBackendAttributeName_t attributeName, cudnnBackendAttributeType_t attributeType,
        int64_t requestedElementCount, int64_t *elementCount, void *arrayOfElements)"""


@prototype(desc_t)
def cudnnBackendFinalize(descriptor):
    """cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor)"""


@prototype(handle_t, desc_t, desc_t)
def cudnnBackendExecute(handle, executionPlan, variantPack):
    """cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle,
        cudnnBackendDescriptor_t executionPlan, cudnnBackendDescriptor_t variantPack)"""
